"""How good one question's answers are against their labels: the numbers a team reads before it lets blink act.

`evaluate(kind, options, probabilities, labels)` takes, for n labelled rows, the probability of every option and
the index of the true one, and returns accuracy, macro-F1, NLL, Brier, ECE (10 equal-width bins, and 10 bins of
equal mass), the reliability table, the confusion matrix (score: also the mean absolute error in levels), the
risk–coverage curve, the wrong answers that survive a 0.8 and a 0.9 gate, bootstrap 95 % intervals on accuracy
and ECE, and the certificate (blink.tasks.certify: the lowest confidence at which at most α of answers are wrong, with
probability 1 − δ; the rows must be held out from any fit).

Confidence is the top option's probability and the answer is that option (the first, on a tie), for every type:
a noul answer is "true" when P(true) ≥ P(false). Written with numpy alone: the server does not carry scikit-learn and
scipy (~100 MB) for a few sums; ci/tests/test_evaluation.py holds these figures to scikit-learn's to 1e-9.
"""

from __future__ import annotations

import numpy as np

from blink.tasks.certify import ALPHA, DELTA, certify

BINS = 10
GATES = (0.8, 0.9)
RESAMPLES = 1000  # bootstrap resamples for the 95 % intervals
CURVE_POINTS = 1000  # the risk–coverage curve's points at most (evenly spaced by rank beyond that)
SHOWN_ROWS = 100  # row numbers listed per gate at most (the count is always whole)


def evaluate(
    kind: str, options: list[str], probabilities, labels, rows=None, seed: int = 0, alpha=ALPHA, delta=DELTA
) -> dict:
    """The report of one question. `probabilities`: n × len(options); `labels`: n option indices; `rows`: the row
    number of each (for the wrong answers a gate lets through; default 0..n-1); `seed`: the bootstrap's; `alpha` and
    `delta`: the certificate's."""
    p = np.asarray(probabilities, dtype=np.float64)
    y = np.asarray(labels, dtype=np.int64)
    n, k = p.shape
    if n == 0 or len(y) != n or k != len(options):
        raise ValueError("evaluate needs one row of len(options) probabilities per label, and at least one row")
    rows = np.arange(n) if rows is None else np.asarray(rows)
    top = p.argmax(axis=1)
    confidence = p[np.arange(n), top]
    hit = top == y
    report = {
        "type": kind,
        "n": int(n),
        "options": list(options),
        **figures(kind, p, y),
        "reliability": reliability(confidence, hit),
        "confusion": confusion(y, top, k).tolist(),
        "risk_coverage": risk_coverage(confidence, hit),
        "gates": [gate(t, confidence, hit, rows) for t in GATES],
        "intervals": intervals(confidence, hit, seed),
        "certificate": certify(confidence, hit, k, alpha, delta),
    }
    if kind == "score":
        report["mae_levels"] = float(np.abs(top - y).mean())
    return report


def figures(kind: str, p, y) -> dict:
    """The figures that set ways of serving side by side: accuracy, macro-F1, NLL, Brier and both ECEs."""
    p, y = np.asarray(p, dtype=np.float64), np.asarray(y, dtype=np.int64)
    n = len(y)
    top = p.argmax(axis=1)
    confidence, hit = p[np.arange(n), top], top == y
    return {
        "accuracy": float(hit.mean()),
        "macro_f1": macro_f1(y, top),
        "nll": float(row_losses(p, y).mean()),
        "brier": brier(p, y, halved=kind == "noul"),
        "ece": ece(confidence, hit),
        "ece_equal_mass": ece_equal_mass(confidence, hit),
    }


def row_losses(p, y) -> np.ndarray:
    """Each row's negative log-likelihood of its label, in nats (a zero probability counted as 1e-300)."""
    return -np.log(np.clip(p[np.arange(len(y)), y], 1e-300, None))


def macro_f1(y, predicted) -> float:
    """The mean F1 over the options that are a label or an answer (scikit-learn's `average="macro"`; an option
    never labelled nor answered tells nothing and is left out)."""
    scores = []
    for option in np.union1d(y, predicted):
        tp = np.sum((predicted == option) & (y == option))
        fp = np.sum((predicted == option) & (y != option))
        fn = np.sum((predicted != option) & (y == option))
        scores.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    return float(np.mean(scores))


def brier(p, y, halved: bool) -> float:
    """The mean over rows of Σ over options (p − truth)²; halved for yes/no, as is customary there ((P(true) −
    truth)², in [0, 1])."""
    truth = np.zeros_like(p)
    truth[np.arange(len(y)), y] = 1.0
    total = float(((p - truth) ** 2).sum(axis=1).mean())
    return total / 2 if halved else total


def bin_of(confidence):
    """The equal-width bin of each confidence: [0, 0.1), …, [0.9, 1.0] (1.0 falls in the last)."""
    return np.minimum((confidence * BINS).astype(np.int64), BINS - 1)


def ece(confidence, hit) -> float:
    """Expected calibration error, top label, 10 equal-width bins: Σ_b |hits_b − Σ confidence_b| / n."""
    b = bin_of(confidence)
    gap = np.bincount(b, weights=hit - confidence, minlength=BINS)
    return float(np.abs(gap).sum() / len(confidence))


def ece_equal_mass(confidence, hit) -> float:
    """The same with 10 bins of (nearly) equal count, by rank of confidence: less noisy where answers crowd near
    1.0, as a confident model's do."""
    order = np.argsort(confidence, kind="stable")
    gaps = [abs(float(np.sum(hit[g] - confidence[g]))) for g in np.array_split(order, min(BINS, len(order)))]
    return float(sum(gaps) / len(confidence))


def reliability(confidence, hit) -> list[dict]:
    """Per equal-width bin with answers in it: its bounds, mean confidence, accuracy and count."""
    b = bin_of(confidence)
    counts = np.bincount(b, minlength=BINS)
    sums = np.bincount(b, weights=confidence, minlength=BINS)
    hits = np.bincount(b, weights=hit.astype(np.float64), minlength=BINS)
    return [
        {
            "bin": [i / BINS, (i + 1) / BINS],
            "confidence": float(sums[i] / counts[i]),
            "accuracy": float(hits[i] / counts[i]),
            "count": int(counts[i]),
        }
        for i in range(BINS)
        if counts[i]
    ]


def confusion(y, predicted, k: int):
    """k × k counts: row the label, column the answer, in the options' order."""
    return np.bincount(y * k + predicted, minlength=k * k).reshape(k, k)


def risk_coverage(confidence, hit) -> list[dict]:
    """For every threshold t among the confidences (highest first): the share of rows answered with confidence ≥ t
    and the error rate among them. Beyond CURVE_POINTS thresholds, that many evenly spaced by rank (the last kept)."""
    order = np.argsort(-confidence, kind="stable")
    c, wrong = confidence[order], np.cumsum(~hit[order])
    n = len(c)
    ends = np.flatnonzero(np.append(c[1:] != c[:-1], True))  # the last row of each run of equal confidence
    if len(ends) > CURVE_POINTS:
        ends = ends[np.unique(np.linspace(0, len(ends) - 1, CURVE_POINTS).round().astype(np.int64))]
    return [{"threshold": float(c[i]), "coverage": (i + 1) / n, "error_rate": float(wrong[i] / (i + 1))} for i in ends]


def gate(threshold: float, confidence, hit, rows) -> dict:
    """What acting on every answer with confidence ≥ `threshold` would do: the share answered, its error rate, and
    the wrong answers that pass (their rows, the first SHOWN_ROWS)."""
    passed = confidence >= threshold
    wrong = passed & ~hit
    answered = int(passed.sum())
    return {
        "threshold": threshold,
        "coverage": answered / len(confidence),
        "answered": answered,
        "error_rate": float(wrong.sum() / answered) if answered else None,
        "wrong": int(wrong.sum()),
        "wrong_rows": [int(r) for r in rows[wrong][:SHOWN_ROWS]],
    }


def intervals(confidence, hit, seed: int, resamples: int = RESAMPLES) -> dict:
    """Percentile bootstrap 95 % intervals of accuracy and ECE (`resamples` draws of n rows with replacement,
    seeded: the same data gives the same interval)."""
    rng = np.random.default_rng(seed)
    n, b, gap = len(confidence), bin_of(confidence), hit - confidence
    accuracy, eces = [], []
    step = max(1, min(resamples, 4_000_000 // n))  # draws at a time: bounded memory on a large table
    for start in range(0, resamples, step):
        m = min(step, resamples - start)
        idx = rng.integers(0, n, size=(m, n))
        accuracy.append(hit[idx].mean(axis=1))
        keyed = (b[idx] + BINS * np.arange(m)[:, None]).ravel()
        gaps = np.bincount(keyed, weights=gap[idx].ravel(), minlength=m * BINS).reshape(m, BINS)
        eces.append(np.abs(gaps).sum(axis=1) / n)
    return {
        "accuracy": [float(v) for v in np.percentile(np.concatenate(accuracy), [2.5, 97.5])],
        "ece": [float(v) for v in np.percentile(np.concatenate(eces), [2.5, 97.5])],
        "resamples": resamples,
    }
