"""Which answers are safe to act on without a person: the lowest confidence threshold t such that, with probability
at least 1 − δ, at most α of the answers whose top probability is ≥ t are wrong (Learn-then-Test, Angelopoulos et
al. 2021).

Read against held-out labels (rows nothing was fitted on), for a grid of thresholds fixed before any label is read
(0.9999, 0.9998, …, 0.999, 0.998, …, 0.99, 0.98, … down to the first ≤ 1/k, for k options: below it every answer
passes). At each t the null hypothesis "the error rate above t exceeds α" gets an exact binomial p-value,
P(Bin(n_t, α) ≤ wrong_t) — the Clopper–Pearson test. Fixed-sequence scans start at the grid's top, at 0.999, at 0.99,
at each tenth (0.9, 0.8, …) and at its lowest point; each walks down while its p-value is ≤ δ/B (B scans: Bonferroni
over the scans, so together they hold at δ) and stops at the first that is not. The lowest threshold any scan
reaches is certified. One scan from the top alone would stop at once wherever the top of the grid holds few answers;
a Bonferroni bound over every threshold would pay for ~100 of them.

With too few labels no outcome could certify anything; that is said in numbers (`needed`: the fewest answers above a
threshold, none of them wrong, that certify it).

What the guarantee needs: the held-out rows and the traffic are exchangeable (drawn alike). It says nothing of
traffic that has moved; the drift monitor is for that.

The binomial tail is written here (a cumulative sum of log terms) rather than taken from scipy: scipy is ~100 MB in
the server for one sum; ci/tests/test_certify.py holds it to scipy.stats.binom.cdf.
"""

from __future__ import annotations

import math

import numpy as np

ALPHA = 0.05  # at most 1 in 20 acted-on answers wrong: a reviewer's usual tolerance, and the one most peers default to
DELTA = 0.05  # the guarantee holds in 19 of 20 held-out sets, as a 95 % interval does
STEP = 0.01  # the grid's spacing below 0.99


def check(alpha: float, delta: float) -> str | None:
    """Why α and δ cannot be used, or None."""
    if not (isinstance(alpha, int | float) and 0 < alpha < 1):
        return f"alpha is the share of certified answers allowed to be wrong: a number in (0, 1), not {alpha!r}"
    if not (isinstance(delta, int | float) and 0 < delta < 1):
        return f"delta is the chance the guarantee fails: a number in (0, 1), not {delta!r}"
    return None


def grid(options: int) -> list[float]:
    """The thresholds, highest first: 0.9999, 0.9998, …, 0.999, 0.998, …, 0.99, 0.98, … down to the first ≤
    1/options (which every answer passes). Finer near 1, where a sure model puts most of its answers; not 1 itself,
    which a top probability rarely reaches exactly."""
    out = [round(1 - i * 1e-4, 4) for i in range(1, 10)] + [round(1 - i * 1e-3, 3) for i in range(1, 10)]
    i = 1
    while out[-1] > 1.0 / options and out[-1] > 0:
        out.append(max(round(1 - i * STEP, 2), 0.0))
        i += 1
    return out


def binomial_cdf(k: int, n: int, p: float) -> float:
    """P(Bin(n, p) ≤ k), exact: the log terms log C(n, i) + i log p + (n − i) log(1 − p), summed stably."""
    if n <= 0 or k >= n:
        return 1.0
    if k < 0:
        return 0.0
    i = np.arange(1, k + 1, dtype=np.float64)
    log_comb = np.concatenate(([0.0], np.cumsum(np.log(n - i + 1) - np.log(i))))
    terms = log_comb + np.arange(k + 1) * math.log(p) + (n - np.arange(k + 1)) * math.log1p(-p)
    top = terms.max()
    return float(min(1.0, math.exp(top) * np.exp(terms - top).sum()))


def needed(alpha: float, level: float) -> int:
    """The fewest answers, none wrong, whose p-value (1 − α)^n is ≤ `level`."""
    return math.ceil(math.log(level) / math.log1p(-alpha) - 1e-12)


def certify(confidence, hit, options: int, alpha: float = ALPHA, delta: float = DELTA) -> dict:
    """The certificate of one question from its held-out rows: each row's top probability and whether that answer
    was right. `threshold` is None where nothing could be certified, and `reason` says why."""
    c = np.asarray(confidence, dtype=np.float64)
    wrong = ~np.asarray(hit, dtype=bool)
    thresholds = grid(options)
    counts = above(c, wrong, thresholds)
    starts = chain_starts(thresholds)
    level = delta / len(starts)
    p_values = [binomial_cdf(w, n, alpha) for n, w in counts]
    ends = [end for end in (walk(p_values, s, level) for s in starts) if end is not None]
    out = {
        "alpha": alpha,
        "delta": delta,
        "held_out": len(c),
        "needed": needed(alpha, level),
        "grid": {
            "highest": thresholds[0],
            "lowest": thresholds[-1],
            "size": len(thresholds),
            "starts": [thresholds[j] for j in starts],
        },
        "threshold": None,
    }
    if not ends:
        out["reason"] = reason(out, len(c), counts, alpha)
        return out
    j = max(ends)  # the lowest threshold any chain reached
    n, w = counts[j]
    out.update(
        threshold=thresholds[j],
        answered=n,
        coverage=n / len(c),
        wrong=w,
        error_rate=w / n,
        p_value=p_values[j],
    )
    return out


def chain_starts(thresholds: list[float]) -> list[int]:
    """Where the chains start: the grid's top, 0.999, 0.99, each tenth (0.9, 0.8, …) and its lowest (every answer)."""
    last = len(thresholds) - 1
    return [
        j for j, t in enumerate(thresholds) if j in (0, last) or t in (0.999, 0.99) or round(t * 10, 10).is_integer()
    ]


def walk(p_values: list[float], start: int, level: float) -> int | None:
    """A fixed sequence from `start` down the grid: the last threshold certified before the first that is not."""
    end = None
    for j in range(start, len(p_values)):
        if p_values[j] > level:
            break
        end = j
    return end


def above(confidence, wrong, thresholds) -> list[tuple[int, int]]:
    """Per threshold: how many answers reach it, and how many of those are wrong (one sort, not one pass each)."""
    order = np.argsort(-confidence, kind="stable")
    c, wrong_so_far = confidence[order], np.concatenate(([0], np.cumsum(wrong[order])))
    reach = np.searchsorted(-c, -np.asarray(thresholds), side="right")  # rows with confidence >= t
    return [(int(m), int(wrong_so_far[m])) for m in reach]


def reason(out: dict, n: int, counts: list[tuple[int, int]], alpha: float) -> str:
    if n < out["needed"]:
        return (
            f"too few held-out labels: certifying needs at least {out['needed']} answers above a threshold with none "
            f"wrong; there are {n} labelled rows"
        )
    n_all, w_all = counts[-1]
    return (
        f"no threshold's answers were many enough and right enough to show an error rate of at most {alpha:g} "
        f"(answering all {n_all}, {w_all} are wrong); more labels, or a larger alpha, may certify one"
    )
