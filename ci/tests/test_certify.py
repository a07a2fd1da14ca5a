"""Certification (blink.tasks.certify): its binomial tail held to scipy's; its guarantee held by simulation (known
probability models, hundreds of simulated held-out sets: the share whose certified threshold lets through an error
rate above α stays within δ plus binomial slack); its two ends, on synthetic answers and on the demo model's (labels
equal to the answers certify everything once there are enough; labels at random certify nothing); and too few labels
said in numbers."""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction

import httpx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binom

from blink.tasks.certify import binomial_cdf, certify, check, grid, needed
from helpers.batch import QUESTIONS, tickets

SETS = 400  # simulated held-out sets per model


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 5000), st.floats(0.0, 1.0), st.floats(1e-4, 0.9999))
def test_the_binomial_tail_is_scipys(n, share, p):
    """Where a certificate is decided (p-values down to 1e-12); further out scipy's own tail drifts (3e-5 relative
    at 1e-265), so the exact sums below judge there."""
    k = int(share * n)
    expected = binom.cdf(k, n, p)
    if expected >= 1e-12:
        assert math.isclose(binomial_cdf(k, n, p), expected, rel_tol=1e-9), (k, n, p)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 400), st.floats(0.0, 1.0), st.floats(1e-4, 0.9999))
def test_the_binomial_tail_is_the_exact_sum_at_every_magnitude(n, share, p):
    k, exact = int(share * n), Fraction(p)
    expected = float(sum(math.comb(n, i) * exact**i * (1 - exact) ** (n - i) for i in range(k + 1)))
    assert math.isclose(binomial_cdf(k, n, p), expected, rel_tol=1e-9, abs_tol=1e-300), (k, n, p)


def test_the_grid_is_fixed_by_the_options_alone():
    assert (
        grid(2)[:2] == [0.9999, 0.9998]
        and grid(2)[8:11] == [0.9991, 0.999, 0.998]
        and grid(2)[17:20] == [0.991, 0.99, 0.98]
    )
    assert grid(2)[-1] == 0.5 and len(grid(2)) == 18 + 50
    assert grid(4)[-1] == 0.25 and grid(3)[-1] <= 1 / 3 < grid(3)[-2]
    assert grid(255)[-1] == 0.0 and len(grid(255)) == 18 + 100
    assert grid(2) == sorted(set(grid(2)), reverse=True)  # strictly falling
    assert needed(0.05, 0.05) == 59 and needed(0.05, 0.025) == 72  # (1 - α)^n ≤ level, the customary 59 at 5 %/5 %


def risk_above(t: float, wrong_rate, lo: float = 0.5) -> float:
    """The population's error rate among answers with confidence ≥ t, confidence uniform on [lo, 1]."""
    xs = np.linspace(max(t, lo), 1.0, 20_001)
    return float(wrong_rate(xs).mean())


MODELS = {
    # calibrated: right with probability its confidence; the error rate above t is (1 - t) / 2
    "calibrated": lambda c: 1.0 - c,
    # wrong slightly more than α everywhere: no threshold is safe, so any certificate is a failure
    "flat, just above alpha": lambda c: np.full_like(c, 0.1 + 0.01),
    # wrong more often the more confident it is: the top of the grid is where the danger is
    "worse when confident": lambda c: 0.4 * (c - 0.5) + 0.02,
}


@pytest.mark.parametrize("model", sorted(MODELS))
def test_the_guarantee_holds_by_simulation(model):
    alpha, delta, n = 0.1, 0.1, 2000
    wrong_rate = MODELS[model]
    rng = np.random.default_rng(sorted(MODELS).index(model))
    failures = certified = 0
    for _ in range(SETS):
        c = rng.uniform(0.5, 1.0, n)
        hit = rng.random(n) >= wrong_rate(c)
        out = certify(c, hit, options=2, alpha=alpha, delta=delta)
        if out["threshold"] is not None:
            certified += 1
            failures += risk_above(out["threshold"], wrong_rate) > alpha
    slack = 3 * math.sqrt(delta * (1 - delta) / SETS)
    assert failures / SETS <= delta + slack, (model, failures, certified)
    if model == "calibrated":  # and it is not vacuous: the safe thresholds (t ≥ 0.8) are found
        assert certified >= 0.85 * SETS


def test_the_certified_threshold_is_near_the_safe_one_with_many_labels():
    rng = np.random.default_rng(7)
    c = rng.uniform(0.5, 1.0, 20_000)
    out = certify(c, rng.random(c.size) < c, options=2, alpha=0.1, delta=0.05)
    assert 0.8 <= out["threshold"] <= 0.84  # the error rate above t is (1 - t) / 2: at most 0.1 from t = 0.8
    assert out["error_rate"] <= 0.1 and out["answered"] == int((c >= out["threshold"]).sum())
    assert out["coverage"] == out["answered"] / c.size and out["p_value"] <= 0.05 / 2


@pytest.mark.parametrize("options", [2, 4, 255])
def test_labels_equal_to_the_answers_certify_everything_once_there_are_enough(options):
    rng = np.random.default_rng(options)
    top = rng.dirichlet(np.ones(options), size=400).max(axis=1)
    out = certify(top, np.ones(top.size, bool), options=options)
    assert out["threshold"] == grid(options)[-1] and out["coverage"] == 1.0 and out["wrong"] == 0
    chains = len(out["grid"]["starts"])
    assert out["needed"] == needed(0.05, 0.05 / chains) and 95 <= out["needed"] <= 110
    m = out["needed"]
    assert certify(top[:m], np.ones(m, bool), options=options)["threshold"] == grid(options)[-1]
    few = certify(top[: m - 1], np.ones(m - 1, bool), options=options)
    assert (
        few["threshold"] is None and f"at least {m} answers" in few["reason"] and f"there are {m - 1}" in few["reason"]
    )


def test_labels_at_random_certify_nothing():
    rng = np.random.default_rng(3)
    top = rng.uniform(0.5, 1.0, 5000)
    out = certify(top, rng.random(top.size) < 0.5, options=2)
    assert out["threshold"] is None and "answering all 5000" in out["reason"]


def test_confident_answers_are_certified_by_the_fixed_sequence():
    """Where the top of the grid is full of right answers, the scan from its top walks down it."""
    rng = np.random.default_rng(11)
    c = np.concatenate([np.full(150, 0.995), rng.uniform(0.5, 0.99, 150)])
    hit = np.concatenate([np.ones(150, bool), rng.random(150) < 0.6])
    out = certify(c, hit, options=2, alpha=0.05, delta=0.05)
    assert 0.9 < out["threshold"] <= 0.99 and out["wrong"] <= 0.05 * out["answered"] and out["answered"] > 150


@pytest.mark.parametrize("alpha, delta", [(0, 0.05), (1, 0.05), (0.05, 0), (0.05, 1.5), ("0.1", 0.05), (0.1, None)])
def test_alpha_and_delta_outside_their_ranges_are_refused_in_words(alpha, delta):
    why = check(alpha, delta)
    assert why and ("alpha" in why if not (isinstance(alpha, float) and 0 < alpha < 1) else "delta" in why)
    assert check(0.05, 0.05) is None


def test_a_model_sure_of_most_answers_is_certified_among_them():
    """A band of bad answers at 0.99-0.995 under good ones at 0.995-0.9999: the grid's thousandths find the good ones
    (a grid of hundredths would start at 0.99, below the bad band, and certify nothing)."""
    rng = np.random.default_rng(13)
    c = np.concatenate([rng.uniform(0.995, 0.9999, 1000), rng.uniform(0.99, 0.995, 1000), rng.uniform(0.5, 0.99, 500)])
    hit = np.concatenate([rng.random(1000) >= 0.05, rng.random(1000) >= 0.4, rng.random(500) >= 0.5])
    out = certify(c, hit, options=2, alpha=0.1, delta=0.05)
    assert 0.993 < out["threshold"] < 0.997 and out["coverage"] >= 0.4 and out["error_rate"] <= 0.1, out


@pytest.mark.e2e
def test_the_two_ends_on_the_demo_model(server):
    """The demo model's own answers (its real spread of confidence, through the server): labels equal to its top
    answers certify every answer once there are enough of them; labels at random certify nothing."""
    rows = tickets(130, seed=21)

    def ask(row):
        sent = httpx.post(server + "/v1/systemone", json={"state": row["text"], "questions": QUESTIONS}, timeout=120)
        assert sent.status_code == 200, sent.text[:500]
        return sent.json()["answers"]

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(ask, rows))
    rng = np.random.default_rng(21)
    for qid in ("refund", "team", "anger"):
        if qid == "refund":
            p_true = np.array([a[qid]["noul"] for a in answers])
            p = np.stack([p_true, 1 - p_true], axis=1)
        else:
            p = np.array([list(a[qid]["probabilities"].values()) for a in answers])
        confidence, top, k = p.max(axis=1), p.argmax(axis=1), p.shape[1]
        own = certify(confidence, top == top, k)
        assert len(rows) >= own["needed"] and own["threshold"] == grid(k)[-1] and own["coverage"] == 1.0, (qid, own)
        guessed = certify(confidence, top == rng.integers(0, k, len(rows)), k)
        assert guessed["threshold"] is None, (qid, guessed)
