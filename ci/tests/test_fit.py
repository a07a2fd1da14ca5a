"""Fitting a question to its labels (blink.tasks.fit): a model too sure of itself gets its temperature back, a
calibrated one keeps nothing, a biased one its bias; Platt scaling matches scikit-learn's logistic regression; and
every out-of-fold answer comes from a fit that never saw its row's label."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.linear_model import LogisticRegression

from blink.tasks.evaluation import row_losses
from blink.tasks.fit import MIN_ROWS, apply, cross_validate, fit_one, fit_then_certify, logits_of


def world(n: int, k: int, seed: int):
    """True logits, and labels drawn from them: a model that reads them as they are is calibrated."""
    rng = np.random.default_rng(seed)
    z = rng.normal(0.0, 2.0, (n, k))
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    y = (rng.random(n)[:, None] > np.cumsum(p, axis=1)).sum(axis=1)
    return z, y


def served(z) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_a_model_too_sure_of_itself_gets_its_temperature_back():
    z, y = world(1500, 4, seed=1)
    fit = cross_validate(served(3.0 * z), y)
    assert fit["kept"] == "temperature" and abs(fit["params"]["temperature"] - 3.0) < 0.3, fit["params"]
    assert fit["cv_nll"]["temperature"] < fit["cv_nll"]["none"] - 0.2


def test_a_calibrated_model_keeps_nothing():
    for seed in range(3):
        z, y = world(800, 3, seed=10 + seed)
        fit = cross_validate(served(z), y)
        assert fit["kept"] == "none" and fit["params"] == {} and "noise" in fit["why"], fit["cv_nll"]
        assert np.allclose(fit["held_out"], served(z), atol=1e-12)  # nothing kept: the served answers, unchanged


def test_a_biased_model_gets_its_bias_taken_off():
    z, y = world(1500, 4, seed=2)
    shift = np.array([1.5, 0.0, 0.0, -1.0])
    fit = cross_validate(served(z + shift), y)
    assert fit["kept"] == "vector", fit["cv_nll"]
    expected = -(shift - shift.mean())
    assert np.abs(np.asarray(fit["params"]["bias"]) - expected).max() < 0.35, fit["params"]
    assert abs(sum(fit["params"]["bias"])) < 1e-9  # told centred


def test_platt_scaling_is_scikit_learns_logistic_regression():
    rng = np.random.default_rng(5)
    x = rng.normal(0.0, 2.0, 1000)
    y_true = (rng.random(1000) < 1 / (1 + np.exp(-(0.5 * x - 0.7)))).astype(np.int64)
    p = np.stack([1 / (1 + np.exp(-x)), 1 / (1 + np.exp(x))], axis=1)  # options (true, false): index 0 is "true"
    labels = 1 - y_true
    ours = row_losses(apply(fit_one("vector", logits_of(p), labels), p), labels).mean()
    judge = LogisticRegression(C=1e9, tol=1e-10, max_iter=10_000).fit(x[:, None], y_true)
    theirs = row_losses(np.stack(judge.predict_proba(x[:, None])[:, ::-1].T, axis=1), labels).mean()
    assert abs(ours - theirs) < 1e-5, (ours, theirs)


@settings(max_examples=8, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 59))
def test_an_out_of_fold_answer_never_saw_its_own_label(seed, row):
    z, y = world(60, 3, seed=seed % 1000)
    p = served(2.0 * z)
    before = cross_validate(p, y)
    flipped = y.copy()
    flipped[row] = (y[row] + 1) % 3
    after = cross_validate(p, flipped)
    if before["kept"] == after["kept"]:
        assert np.allclose(before["held_out"][row], after["held_out"][row], atol=1e-9)


def test_too_few_labels_fit_nothing_and_say_so():
    z, y = world(MIN_ROWS - 1, 2, seed=3)
    fit = cross_validate(served(z), y)
    assert fit["kept"] == "none" and "held_out" not in fit and f"at least {MIN_ROWS}" in fit["why"]


@pytest.mark.parametrize("k", [2, 5])
def test_an_option_no_label_names_stays_finite(k):
    z, y = world(200, k, seed=4)
    y[:] = 0  # every label the first option
    fit = cross_validate(served(z), y)
    assert np.isfinite(fit["held_out"]).all() and np.isfinite(list(fit["cv_nll"].values())).all()


def test_a_temperature_past_its_bounds_is_held_at_the_bound():
    z, _ = world(500, 3, seed=6)
    y = np.random.default_rng(6).integers(0, 3, 500)  # labels unrelated to the answers: the best T is infinite
    for method in ("temperature", "vector"):
        params = fit_one(method, logits_of(served(z)), y)
        assert params["temperature"] == 20.0, params
    sure = fit_one("temperature", logits_of(served(0.01 * z)), world(500, 3, seed=6)[1])  # far too unsure
    assert sure["temperature"] == 0.05


def test_many_options_try_a_temperature_only_and_say_so():
    z, y = world(300, 100, seed=8)
    fit = cross_validate(served(2.0 * z), y)
    assert set(fit["cv_nll"]) == {"none", "temperature"} and "up to 64 options, not 100" in fit["why"]
    assert fit["kept"] == "temperature" and abs(fit["params"]["temperature"] - 2.0) < 0.5


def test_a_fit_is_certified_only_on_rows_it_never_saw():
    z, y = world(500, 3, seed=9)
    p = served(2.5 * z)
    first = fit_then_certify(p, y, alpha=0.2, delta=0.1)
    assert first["certify_rows"] == 200 and first["fit_rows"] == 300 and first["kept"] == "temperature"
    aside = np.random.default_rng(0).permutation(500)[:200]  # the split: seeded, the first 40 % set aside
    flipped = y.copy()
    flipped[aside] = (y[aside] + 1) % 3  # every set-aside label changed: the fit must not move
    second = fit_then_certify(p, flipped, alpha=0.2, delta=0.1)
    assert second["params"] == first["params"]
    assert first["threshold"] is not None and second["threshold"] is None  # the certificate reads those labels
