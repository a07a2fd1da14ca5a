"""The `x_` request fields blink reads on a decision (System One and `/v1/decisions` alike).

The wire ignores unknown fields (the live API does), so these are prefixed `x_` as the spec asks of
extensions; a known one with a bad value is refused with a 422 naming it, never ignored.
"""

from __future__ import annotations

import json

from blink.errors import InvalidRequest

CALIBRATION_VALUES = ("calibrated", "raw", "fitted", "prior", "fitted+prior")
# what a request's answers get: the fitted temperatures (the calibration file's), the content-free prior, both, or
# neither ("raw": exactly the model's probabilities); "calibrated" (or no field) is the server's default
MODES = ("fitted", "prior", "fitted+prior", "raw")
ORDERS = ("fixed", "rotate")


def _pick(body: dict, name: str, allowed: tuple, default: str | None) -> str | None:
    value = body.get(name, default)
    if value is not None and value not in allowed:
        choices = " or ".join(f'"{a}"' for a in allowed)
        raise InvalidRequest(f"`{name}` must be {choices}, got {json.dumps(value)}", loc=["body", name], kind="enum")
    return value


def requested_raw(body: dict) -> bool:
    """`x_calibration`: "raw" (the model's own probabilities) or "calibrated" (the default: the server's file)."""
    return _pick(body, "x_calibration", CALIBRATION_VALUES, "calibrated") == "raw"


def requested_calibration(body: dict) -> str | None:
    """`x_calibration` as one of `MODES`; None when absent or "calibrated" (the server's default applies)."""
    value = _pick(body, "x_calibration", CALIBRATION_VALUES, None)
    return None if value == "calibrated" else value


def uses_temperatures(mode: str) -> bool:
    return mode in ("fitted", "fitted+prior")


def uses_prior(mode: str) -> bool:
    return mode in ("prior", "fitted+prior")


def requested_order(body: dict) -> str | None:
    """`x_order`: "fixed" (options read as given) or "rotate"; None when absent (the server's default applies)."""
    return _pick(body, "x_order", ORDERS, None)
