"""The Decide tab's Calibration menu: what each entry says and sends, and the caveat beside answers, true to what
the chosen calibration does on this server."""

import re

from blink.decide.x_fields import MODES, uses_prior, uses_temperatures

# the Calibration menu: what it shows, the `x_calibration` it sends; SPACE_DEFAULT sends none (the server's default)
SPACE_DEFAULT = "default"
CALIBRATION_WORDS = {
    "fitted": "temperature scaling",
    "prior": "bias removal",
    "fitted+prior": "temperature scaling, then bias removal",
    "raw": "none: the model's own probabilities",
}
CALIBRATION_INFO = (
    "How the probabilities are adjusted. Temperature scaling corrects how sure the model sounds, with settings "
    "fitted for these weights. Bias removal takes out the model's lean towards some options whatever the text says: "
    'each answer is divided by the same question\'s answer about text that says nothing (such as "N/A").'
)


def calibration_choices(default: str, loaded: bool) -> list[tuple[str, str]]:
    """The Calibration menu's (label, value) pairs, this server's default first (`default`: one of MODES; `loaded`:
    a calibration file is loaded, without which temperature scaling changes nothing)."""
    words = dict(CALIBRATION_WORDS)
    if not loaded:
        words["fitted"] += " (none fitted for this model: same as None)"
        words["fitted+prior"] = "temperature scaling (none fitted for this model), then bias removal"
    default_words = calibration_words(default, loaded)
    return [(f"Space default ({default_words})", SPACE_DEFAULT)] + [
        (words[mode][:1].upper() + words[mode][1:], mode) for mode in MODES
    ]


def calibration_words(mode: str, loaded: bool) -> str:
    """What answers asked with `mode` get, in a few words (the default's label)."""
    temperatures, prior = loaded and uses_temperatures(mode), uses_prior(mode)
    if temperatures and prior:
        return CALIBRATION_WORDS["fitted+prior"]
    if temperatures or prior:
        return CALIBRATION_WORDS["fitted" if temperatures else "prior"]
    return "none"


def chosen_calibration(value) -> str | None:
    """The `x_calibration` the form sends: one of MODES, or None (the Space's default: the field is not sent)."""
    return value if value in MODES else None


def decide_caveat(caveat: str, mode: str, calibrated: bool) -> str:
    """The caveat beside answers, true to what answers asked with `mode` (one of MODES, the server's default
    resolved) get on this server: "calibrated" only where something is applied (every answer's
    `x_calibration.applied`), temperature scaling only where a calibration is loaded (/healthz
    `calibration.loaded`), the prior whenever `mode` divides by it."""
    temperatures, prior = calibrated and uses_temperatures(mode), uses_prior(mode)
    removal = (
        "freed of the model's lean towards some options whatever the text says (each answer is divided by the "
        'same question\'s answer about text that says nothing, such as "N/A")'
    )
    if temperatures and prior:
        note = f"The probabilities are calibrated for these weights (temperature scaling), then {removal}."
    elif temperatures:
        note = "The probabilities are calibrated for these weights (temperature scaling)."
    elif prior:
        note = f"The probabilities are {removal}; no temperature scaling is applied."
    else:
        caveat = re.sub(r"\bcalibrated\s+", "", caveat)
        if mode == "raw":
            note = "The probabilities are the model's own: no calibration is applied to these answers."
        else:
            note = "The probabilities are the model's own: no calibration is applied on this server."
    return " ".join(part for part in (caveat.strip(), note) if part)
