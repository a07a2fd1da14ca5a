"""A task: a named, recurring decision fitted to its labels — its questions (System One's shape), what was fitted per
question (blink.tasks.fit) and the certificate that fit earned on labels it never saw (blink.tasks.certify), bound to
the weights and the served answers it was fitted on. `python -m blink task fit` writes the file:

    {"format": "blink-task", "format_version": 1, "name": "tickets", "version": "3f9a0c2e1b7d",
     "questions": {...},                                   # the System One questions, as given
     "weights": "sha256:…",                                # what produced the probabilities it was fitted on
     "served": {"calibration": …, "answers": …},           # the server's calibration and answer settings then
     "fitted": {"team": {"type": "choice", "options": [...], "kept": "temperature",
                         "params": {"temperature": 1.3}, "certificate": {"alpha", "delta", "threshold", …}}},
     "report": {...}}                                       # the evaluation it came from (blink.tasks.labelled)

The fit served is the one `fit_then_certify` made on the rows it did not set aside, so its certificate is read from
labels no fit saw. `version` is a hash of everything that changes an answer (questions, weights, served settings,
fitted): a refit that changes any of it is a new version, and an answer names the version that served it.
"""

from __future__ import annotations

import hashlib
import math
import re

import orjson

from blink.errors import StartupError

FORMAT, FORMAT_VERSION = "blink-task", 1
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
METHODS = ("none", "temperature", "vector")


class TaskError(StartupError):
    """A task file blink will not use; the message names the fault."""


def name_problem(name) -> str | None:
    """Why `name` cannot name a task, or None: a letter or digit, then letters, digits, '.', '_' or '-' (no path
    characters), at most 64."""
    if isinstance(name, str) and NAME.fullmatch(name) and ".." not in name:
        return None
    return (
        f"a task's name is 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit: "
        f"{orjson.dumps(name).decode()[:80]} is not one"
    )


def make(name: str, questions: dict, report: dict, facts: dict) -> dict:
    """The task document from a labelled table's evaluation `report` and the run's `facts` (run-batch's sidecar)."""
    fitted = {}
    for qid, r in report["questions"].items():
        c = r.get("fitted", {}).get("certificate")
        if c is None:  # too few usable labels: served as it is, nothing certified
            why = r.get("fitted", {}).get("why", "no row could be counted")
            c = {"kept": "none", "threshold": None, "reason": why}
        fitted[qid] = {
            "type": r["type"],
            "options": r["options"],
            "kept": c["kept"],
            "params": c.get("params", {}),
            "certificate": {k: v for k, v in c.items() if k not in ("params", "kept", "baseline")},
        }
        if "baseline" in c:  # what its answers looked like on the labelled rows (blink.tasks.drift)
            fitted[qid]["baseline"] = c["baseline"]
    served = served_as(facts["calibration"], facts["answers"])
    doc = {"name": name, "questions": questions, "weights": facts["weights"], "served": served, "fitted": fitted}
    return {"format": FORMAT, "format_version": FORMAT_VERSION, "version": version_of(doc), **doc, "report": report}


def served_as(calibration: dict, answers: dict) -> dict:
    """What shapes the served probabilities a fit is made on: the calibration's temperatures and where they hold
    (not the file's path), the default x_calibration and x_order, the prior's states."""
    return {
        "calibration": {k: calibration.get(k) for k in ("temperatures", "levels")},
        "answers": {k: _listed(answers.get(k)) for k in ("x_calibration", "x_order", "prior_states")},
    }


def _listed(value):
    return list(value) if isinstance(value, tuple) else value


def version_of(doc: dict) -> str:
    keys = ("name", "questions", "weights", "served", "fitted")
    canonical = orjson.dumps({k: doc[k] for k in keys}, option=orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY)
    return hashlib.sha256(canonical).hexdigest()[:12]


def read(path: str) -> dict:
    """A task file, checked: refused (TaskError) naming the fault when it is not blink's, not whole, or tampered."""
    try:
        with open(path, "rb") as fh:
            doc = orjson.loads(fh.read())
    except OSError as error:
        raise TaskError(f"task {path}: {error.strerror or error}") from None
    except orjson.JSONDecodeError as error:
        raise TaskError(f"task {path}: not JSON ({error})") from None
    fault = problem(doc)
    if fault:
        raise TaskError(f"task {path}: {fault}")
    return doc


def problem(doc) -> str | None:
    """What is wrong with a task document, or None."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        return f'not a blink task (its "format" is not "{FORMAT}")'
    if doc.get("format_version") != FORMAT_VERSION:
        return f"format_version {doc.get('format_version')!r}: this blink reads {FORMAT_VERSION}"
    missing = [k for k in ("name", "version", "questions", "weights", "served", "fitted") if k not in doc]
    if missing:
        return f"it has no {', '.join(missing)}"
    if name_problem(doc["name"]):
        return name_problem(doc["name"])
    if not isinstance(doc["questions"], dict) or not isinstance(doc["fitted"], dict):
        return "its questions and fitted must be JSON objects"
    for qid, f in doc["fitted"].items():
        fault = fit_problem(f)
        if fault:
            return f"fitted[{qid!r}]: {fault}"
        if qid not in doc["questions"]:
            return f"fitted[{qid!r}] names a question the task does not ask"
    if version_of(doc) != doc["version"]:
        return "its version does not match its content: it was edited after it was fitted (fit it again)"
    return None


def fit_problem(f) -> str | None:
    if not isinstance(f, dict) or f.get("kept") not in METHODS or not isinstance(f.get("params"), dict):
        return f"kept must be one of {', '.join(METHODS)}, with its params"
    options, params = f.get("options"), f["params"]
    if not isinstance(options, list) or len(options) < 2:
        return "options must list the question's options"
    t = params.get("temperature", 1.0)
    if not _finite(t) or t <= 0:
        return "the temperature must be a positive number"
    bias = params.get("bias", [0.0] * len(options))
    if not isinstance(bias, list) or len(bias) != len(options) or not all(_finite(b) for b in bias):
        return "the bias must be one number per option"
    if "baseline" in f and baseline_problem(f["baseline"], len(options)):
        return baseline_problem(f["baseline"], len(options))
    threshold = f.get("certificate", {}).get("threshold") if isinstance(f.get("certificate"), dict) else "?"
    if threshold is not None and not (_finite(threshold) and 0 < threshold <= 1):
        return "the certificate's threshold must be null or a number in (0, 1]"
    return None


def baseline_problem(base, options: int) -> str | None:
    mix = base.get("mix") if isinstance(base, dict) else None
    if not isinstance(mix, list) or len(mix) != options or not all(_finite(m) and m >= 0 for m in mix):
        return "the baseline's mix must be a share per option"
    if not _finite(base.get("low_confidence")):
        return "the baseline's low_confidence must be a number"
    return None


def _finite(x) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def bind(doc: dict, weights: str, served: dict) -> None:
    """Refuse (TaskError) a task fitted on other weights, or on answers served otherwise (`served`, served_as:
    another calibration, prior or option order): its fit would be applied to probabilities it never saw."""
    name = doc["name"]
    if doc["weights"] != weights:
        raise TaskError(
            f"task {name!r} was fitted on weights {doc['weights']}; this server's are {weights}. Fit it again on "
            "these weights (python -m blink task fit, docs/tasks.md)"
        )
    for key in ("calibration", "answers"):
        if _canonical(doc["served"].get(key)) != _canonical(served.get(key)):
            raise TaskError(
                f"task {name!r} was fitted on answers served with {key} {_canonical(doc['served'].get(key))}; this "
                f"server serves {_canonical(served.get(key))}. Serve as it was fitted, or fit it again"
            )


def _canonical(value) -> str:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
