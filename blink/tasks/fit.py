"""A question's answers fitted to its labels: the best of nothing, a temperature, and a temperature with a bias per
option (vector scaling; for a yes/no question that is Platt scaling), chosen by k-fold cross-validation on the
labels themselves and kept only where the held-out NLL improves by more than its noise (one standard error).

The fit reads the served probabilities' logarithms: a temperature on them is a temperature on the model's logits
(log p is the logits over the served temperature, less a constant per row, and softmax ignores the constant).

`cross_validate` also returns every row's out-of-fold probabilities (each from a fit that never saw the row), so the
report can set "as served" beside "fitted to your labels" on rows neither fit saw. Those rows still all took part in
choosing the method: a certificate is read from rows no fit saw at all (blink.tasks.certify), never from these.

Fitted with torch's L-BFGS (float64) — torch is in the server already, and a two-to-k+1-parameter convex fit needs
nothing more.
"""

from __future__ import annotations

import numpy as np
import torch

FOLDS = 5
METHODS = ("none", "temperature", "vector")  # simplest first: a tie keeps the simpler
MIN_ROWS = 2 * FOLDS  # fewer labelled rows than this: nothing is fitted
BOUNDS = (0.05, 20.0)  # the temperature's range, as `blink calibrate`'s


def logits_of(probabilities) -> np.ndarray:
    return np.log(np.clip(np.asarray(probabilities, dtype=np.float64), 1e-300, None))


def apply(params: dict, probabilities) -> np.ndarray:
    """The probabilities a fit serves: softmax(log p / T + b)."""
    z = logits_of(probabilities) / params.get("temperature", 1.0) + np.asarray(params.get("bias", 0.0))
    z -= z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def fit_one(method: str, z: np.ndarray, y: np.ndarray) -> dict:
    """The parameters of one method fitted by maximum likelihood on logits `z` and labels `y`."""
    if method == "none":
        return {}
    k = z.shape[1]
    zt, yt = torch.from_numpy(z), torch.from_numpy(y)
    log_t = torch.zeros((), dtype=torch.float64, requires_grad=True)
    bias = torch.zeros(k, dtype=torch.float64, requires_grad=method == "vector")
    params = [log_t, bias] if method == "vector" else [log_t]
    lo, hi = np.log(BOUNDS[0]), np.log(BOUNDS[1])
    opt = torch.optim.LBFGS(params, lr=1.0, max_iter=200, tolerance_grad=1e-10, line_search_fn="strong_wolfe")

    def loss():
        opt.zero_grad()
        # a small ridge on the bias: an option no label names would otherwise run off to -inf
        value = torch.nn.functional.cross_entropy(zt / log_t.clamp(lo, hi).exp() + bias, yt) + 1e-4 * (bias**2).sum()
        value.backward()
        return value

    opt.step(loss)
    out = {"temperature": float(np.exp(np.clip(log_t.item(), lo, hi)))}
    if method == "vector":
        b = bias.detach().numpy()
        out["bias"] = (b - b.mean()).tolist()  # softmax ignores a shift: the bias is told centred
    return out


def row_losses(probabilities: np.ndarray, y: np.ndarray) -> np.ndarray:
    return -np.log(np.clip(probabilities[np.arange(len(y)), y], 1e-300, None))


def simplest_within_noise(losses: dict) -> str:
    """The simplest method whose held-out NLL is within one standard error of the best's (the paired difference's
    over the rows): a fit must gain more than the noise of the folds to be kept."""
    best = min(METHODS, key=lambda m: losses[m].mean())
    for m in METHODS:
        d = losses[m] - losses[best]
        if d.mean() <= d.std(ddof=1) / np.sqrt(len(d)):
            return m
    return best


def folds_of(n: int, seed: int) -> np.ndarray:
    """Each row's fold: a seeded shuffle dealt round, so folds differ in size by one at most."""
    fold = np.empty(n, dtype=np.int64)
    fold[np.random.default_rng(seed).permutation(n)] = np.arange(n) % FOLDS
    return fold


def cross_validate(probabilities, labels, seed: int = 0) -> dict:
    """Which method to keep and why, its parameters fitted on every row, each method's out-of-fold NLL, and the
    kept method's out-of-fold probabilities (`held_out`; for n < MIN_ROWS, nothing is fitted)."""
    p = np.asarray(probabilities, dtype=np.float64)
    y = np.asarray(labels, dtype=np.int64)
    n = len(y)
    if n < MIN_ROWS:
        return {"kept": "none", "why": f"{n} labelled rows: at least {MIN_ROWS} are needed to fit and check a fit"}
    z, fold = logits_of(p), folds_of(n, seed)
    out_of_fold = {m: np.empty_like(p) for m in METHODS}
    for f in range(FOLDS):
        train, test = fold != f, fold == f
        for m in METHODS:
            out_of_fold[m][test] = apply(fit_one(m, z[train], y[train]), p[test])
    losses = {m: row_losses(out_of_fold[m], y) for m in METHODS}
    cv = {m: float(losses[m].mean()) for m in METHODS}
    kept = simplest_within_noise(losses)
    why = (
        "no fit lowered the held-out NLL by more than its noise"
        if kept == "none"
        else f"held-out NLL {cv[kept]:.4f} against {cv['none']:.4f} as served ({FOLDS}-fold cross-validation)"
    )
    return {
        "kept": kept,
        "why": why,
        "folds": FOLDS,
        "cv_nll": cv,
        "params": fit_one(kept, z, y),
        "held_out": out_of_fold[kept],
    }
