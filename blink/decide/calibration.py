"""Calibration bound to the weights: a temperature per question type, its file, and how it is fitted (the command
that fits one from labelled data and writes the file: blink.decide.calibrate_command).

A decision model's option probabilities are a softmax over its label logits. Temperature scaling divides those
logits by T before the softmax (T > 1 softens, T < 1 sharpens; the argmax never changes). blink applies one T per
question type (noul, choice, score) on top of the model's own readout (`decision.json`'s temperature, which the
executor applies), so T is fitted against exactly what the server serves raw.

The file (`calibration.json` beside the weights, or `--calibration FILE`):

    {"format": "blink-calibration", "version": 1,
     "temperatures": {"noul": 1.31, "choice": 0.87},          # types left out are served raw
     "weights": "sha256:…",                                    # optional: refuse other weights
     "levels": {"noul": 2, "choice": 8, "score": 10},         # the most options per type in the fit's data
     "fit": {...}}                                             # how it was fitted (the calibrate report)

`weights` is a fingerprint of what produces the logits (weight files, adapter, decision config and template): a
file fitted on other weights refuses to start instead of silently mis-calibrating them. `levels` bounds where a
temperature is known to hold: a question with more options than its type had in the fit is served raw, and the answer
says so (a file without `levels` was fitted when score questions had at most 10 levels: that bound is assumed).

The fit minimises the negative log-likelihood of the labels over T by golden-section search on log T, which is
exact and deterministic: as a function of 1/T the NLL of a softmax is convex, so it is unimodal in log T.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from blink.decide.answers import normalized, probabilities
from blink.errors import StartupError

FORMAT, VERSION = "blink-calibration", 1
FILE_NAME = "calibration.json"
TYPES = ("noul", "choice", "score")
BOUNDS = (0.01, 100.0)  # the temperatures a file may hold and the fit searches
MAX_LEVELS = 255  # the most options a question may have (the limits' default and ceiling)
LEGACY_LEVELS = {"score": 10}  # what a file without `levels` was fitted on: score questions were capped at 10 then
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")
DECISION_FILES = ("decision.json", "decision_template.jinja")


class CalibrationError(StartupError):
    """A calibration file the server refuses to start with (the message says why and what to do)."""


@dataclass(frozen=True)
class Calibration:
    """The temperatures in force (only the types the file fits), where they came from, what weights they fit."""

    temperatures: dict = field(default_factory=dict)
    source: str | None = None
    weights: str | None = None
    levels: dict = field(default_factory=dict)  # type -> the most options its fit saw (absent: no bound)

    def applied(self, raw: bool) -> dict:
        """The temperatures one request gets: none when it asked for `raw` or no file is loaded."""
        return {} if raw else dict(self.temperatures)

    def per_question(self, questions: list, raw: bool) -> tuple[dict, dict]:
        """Each question's temperature (question id -> T) and, for the questions of a calibrated type with more options
        than its fit saw, why they get none (question id -> reason): a temperature is not known to hold there."""
        temperatures, not_applied = {}, {}
        for q in questions:
            t = None if raw else self.temperatures.get(q.type)
            if t is None:
                continue
            fitted = self.levels.get(q.type, MAX_LEVELS)
            if len(q.options) > fitted:
                not_applied[q.name] = (
                    f"{len(q.options)} options; the calibration was fitted on {q.type} questions of at most {fitted}"
                )
            else:
                temperatures[q.name] = t
        return temperatures, not_applied

    def fact(self, raw: bool, questions: list = ()) -> dict:
        """What every response says: `{"applied": bool, "temperatures": {type: T}}`, and `not_applied` (question id ->
        why) for `questions` past the levels the fit saw. `applied` is whether any answer got a temperature."""
        temperatures = self.applied(raw)
        skipped = self.per_question(questions, raw)[1]
        fact = {"applied": bool(temperatures) and len(skipped) < max(len(questions), 1), "temperatures": temperatures}
        if skipped:
            fact["not_applied"] = skipped
        return fact

    def health(self) -> dict:
        """`weights`: the fingerprint the file is bound to (null: a file that applies to any weights)."""
        return {
            "loaded": bool(self.temperatures),
            "source": self.source,
            "temperatures": dict(self.temperatures),
            "weights": self.weights,
            "levels": dict(self.levels),
        }


UNCALIBRATED = Calibration()


# the file --------------------------------------------------------------------------------------------------
def check_temperature(value: Any) -> float:
    """A valid temperature as a float; ValueError says what is wrong."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"must be a number, got {json.dumps(value)}")
    if not (math.isfinite(value) and BOUNDS[0] <= value <= BOUNDS[1]):
        raise ValueError(f"must be {BOUNDS[0]:g}-{BOUNDS[1]:g}, got {value!r}")
    return float(value)


def parse(data: Any, source: str) -> Calibration:
    """A calibration file's content, validated; `CalibrationError` names the file and the fault."""

    def refuse(message: str) -> CalibrationError:
        return CalibrationError(f"calibration file {source}: {message}")

    if not isinstance(data, dict):
        raise refuse("must be a JSON object with `format`, `version` and `temperatures`")
    if data.get("format") != FORMAT:
        raise refuse(f"`format` must be {FORMAT!r}, got {data.get('format')!r}")
    if data.get("version") != VERSION:
        raise refuse(f"`version` {data.get('version')!r} is not one this server reads ({VERSION})")
    temperatures = data.get("temperatures")
    if not isinstance(temperatures, dict) or not temperatures:
        raise refuse(f"`temperatures` must map question types ({', '.join(TYPES)}) to temperatures")
    out = {}
    for kind, value in temperatures.items():
        if kind not in TYPES:
            raise refuse(f"`temperatures` has {kind!r}; question types are {', '.join(TYPES)}")
        try:
            out[kind] = check_temperature(value)
        except ValueError as error:
            raise refuse(f"temperature of {kind!r} {error}") from None
    weights = data.get("weights")
    if weights is not None and not (isinstance(weights, str) and re.fullmatch(r"sha256:[0-9a-f]{64}", weights)):
        raise refuse(f'`weights` must be a fingerprint "sha256:<64 hex>", got {weights!r}')
    levels = parse_levels(data.get("levels", LEGACY_LEVELS), refuse)
    return Calibration({kind: out[kind] for kind in TYPES if kind in out}, source, weights, levels)


def parse_levels(levels: Any, refuse) -> dict:
    """`levels`: question type -> the most options its fit saw, an integer from 2 to MAX_LEVELS."""
    if not isinstance(levels, dict):
        raise refuse(f"`levels` must map question types ({', '.join(TYPES)}) to option counts")
    for kind, value in levels.items():
        if kind not in TYPES:
            raise refuse(f"`levels` has {kind!r}; question types are {', '.join(TYPES)}")
        if isinstance(value, bool) or not isinstance(value, int) or not 2 <= value <= MAX_LEVELS:
            raise refuse(f"`levels` of {kind!r} must be an integer from 2 to {MAX_LEVELS}, got {value!r}")
    return dict(levels)


def read_file(path: str | Path) -> Calibration:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise CalibrationError(f"calibration file {path}: cannot be read ({error.strerror or error})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise CalibrationError(
            f"calibration file {path}: not JSON ({error.msg} at line {error.lineno} column {error.colno})"
        ) from None
    return parse(data, str(path))


def for_model(setting: str | None, root: Path, fingerprint: str) -> Calibration:
    """The calibration a server starts with: `setting` (a file, or `off`), else `calibration.json` beside the
    weights when there is one. A file fitted on other weights (its `weights` differs) refuses to start."""
    if setting is not None and setting.strip().lower() == "off":
        return UNCALIBRATED
    path = Path(setting) if setting else Path(root) / FILE_NAME
    if not setting and not path.is_file():
        return UNCALIBRATED
    calibration = read_file(path)
    if calibration.weights is not None and calibration.weights != fingerprint:
        raise CalibrationError(
            f"calibration file {path} was fitted on other weights ({calibration.weights}); this model's are "
            f"{fingerprint}. Refit it on this model (python -m blink calibrate --model ... DATA.jsonl --out FILE), "
            "or remove its `weights` line to apply it anyway."
        )
    return calibration


def to_file(temperatures: dict, fingerprint: str, fit: dict, levels: dict) -> dict:
    return {
        "format": FORMAT,
        "version": VERSION,
        "temperatures": temperatures,
        "weights": fingerprint,
        "levels": levels,
        "fit": fit,
    }


# the weights' fingerprint ------------------------------------------------------------------------------------
def file_digest(path: Path, manifest: dict) -> str:
    """A weight file's sha256: from `weights.sha256` (checked at load), from the Hub cache's blob name (Hub
    blobs are named by their sha256), else read here."""
    if path.name in manifest:
        return manifest[path.name]
    blob = os.path.basename(os.path.realpath(path))
    if re.fullmatch(r"[0-9a-f]{64}", blob):
        return blob
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 24), b""):
            digest.update(block)
    return digest.hexdigest()


def weights_fingerprint(root: Path, adapter: str | None = None, adapter_revision: str | None = None) -> str:
    """`sha256:<hex>` of what decides the label logits: the weight files, the adapter and the decision config."""
    root = Path(root)
    manifest = {}
    if (root / "weights.sha256").is_file():
        for line in (root / "weights.sha256").read_text(encoding="utf-8").splitlines():
            if line.strip():
                digest, name = line.split(None, 1)
                manifest[name.strip().lstrip("*")] = digest.lower()
    weights = {
        p.name: file_digest(p, manifest)
        for p in sorted(root.iterdir())
        if p.is_file() and p.name.endswith(WEIGHT_SUFFIXES)
    }
    decision = {
        name: hashlib.sha256((root / name).read_bytes()).hexdigest()
        for name in DECISION_FILES
        if (root / name).is_file()
    }
    parts = {"weights": weights, "adapter": [adapter, adapter_revision] if adapter else None, "decision": decision}
    return "sha256:" + hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


# probabilities, metrics and the fit ---------------------------------------------------------------------------
@dataclass
class Example:
    """One labelled question: its readings (label logits in its option order) and the index of the true option."""

    rows: list[list[float]]
    label: int
    # per content-free state (blink.decide.prior), the same question's readings there (label logits, its option order)
    prior_rows: list[list[list[float]]] | None = None


def distribution(e: Example, temperature: float = 1.0, prior: bool = False) -> list[float]:
    """The option probabilities served for `e` at `temperature`, divided by its content-free prior with `prior`
    (the prior read at the same temperature, averaged over the states, as the server does)."""
    p = probabilities(e.rows, temperature)
    if not prior:
        return p
    dists = [probabilities(rows, temperature) for rows in e.prior_rows]
    return normalized(p, [math.fsum(column) / len(dists) for column in zip(*dists)])


def nll(examples: list[Example], temperature: float) -> float:
    return math.fsum(-math.log(max(probabilities(e.rows, temperature)[e.label], 1e-300)) for e in examples) / len(
        examples
    )


def metrics(examples: list[Example], temperature: float = 1.0, bins: int = 10, prior: bool = False) -> dict:
    """n, NLL (nats), ECE (top-label, `bins` equal-width bins), Brier (sum over the options of (p - y)^2) and
    accuracy (the top option is the label); with `prior`, of the prior-normalized probabilities."""
    total = [0.0] * bins
    hits = [0.0] * bins
    counts = [0] * bins
    losses, briers = [], []
    for e in examples:
        p = distribution(e, temperature, prior)
        top = max(range(len(p)), key=p.__getitem__)
        b = min(int(p[top] * bins), bins - 1)
        counts[b] += 1
        total[b] += p[top]
        hits[b] += top == e.label
        losses.append(-math.log(max(p[e.label], 1e-300)))
        briers.append(math.fsum((q - (i == e.label)) ** 2 for i, q in enumerate(p)))
    n = len(examples)
    ece = math.fsum(abs(hits[b] - total[b]) for b in range(bins)) / n
    accuracy = math.fsum(hits) / n
    return {"n": n, "nll": math.fsum(losses) / n, "ece": ece, "brier": math.fsum(briers) / n, "accuracy": accuracy}


def fit_temperature(examples: list[Example], bounds: tuple[float, float] = BOUNDS, tol: float = 1e-7) -> float:
    """The T in `bounds` that minimises the NLL: golden-section search on log T down to `tol` (in log T)."""
    lo, hi = math.log(bounds[0]), math.log(bounds[1])
    ratio = (math.sqrt(5) - 1) / 2
    a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
    fa, fb = nll(examples, math.exp(a)), nll(examples, math.exp(b))
    while hi - lo > tol:
        if fa <= fb:
            hi, b, fb = b, a, fa
            a = hi - ratio * (hi - lo)
            fa = nll(examples, math.exp(a))
        else:
            lo, a, fa = a, b, fb
            b = lo + ratio * (hi - lo)
            fb = nll(examples, math.exp(b))
    # the bounds themselves are candidates: a minimum at the edge (labels the model always gets right) lands there
    candidates = (bounds[0], math.exp((lo + hi) / 2), bounds[1])
    return min(candidates, key=lambda t: nll(examples, t))
