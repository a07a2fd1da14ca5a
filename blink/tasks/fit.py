"""A question's answers fitted to its labels: the best of nothing, a temperature, and a temperature with a bias per
option (vector scaling; for a yes/no question that is Platt scaling), chosen by k-fold cross-validation on the
labels themselves and kept only where the held-out NLL improves by more than its noise (one standard error).

The fit reads the served probabilities' logarithms: a temperature on them is a temperature on the model's logits
(log p is the logits over the served temperature, less a constant per row, and softmax ignores the constant).

`cross_validate` also returns every row's out-of-fold probabilities (each from a fit that never saw the row), so the
report can set "as served" beside "fitted to your labels" on rows neither fit saw. Those rows still all took part in
choosing the method: a certificate is read from rows no fit saw at all (blink.tasks.certify), never from these.

Fitted by Newton's method in numpy: the loss is convex in 1 to k+1 parameters, so a few exact steps do what a general
optimizer does in many more (torch's L-BFGS took ~10× as long here, and scipy is not in the server).
"""

from __future__ import annotations

import numpy as np

from blink.tasks.certify import certify
from blink.tasks.drift import baseline
from blink.tasks.evaluation import row_losses

FOLDS = 5
METHODS = ("none", "temperature", "vector")  # simplest first: a tie keeps the simpler
MIN_ROWS = 2 * FOLDS  # fewer labelled rows than this: nothing is fitted
BOUNDS = (0.05, 20.0)  # the temperature's range, as `blink calibrate`'s
# vector scaling is tried up to this many options: its Hessian costs rows × options², and a bias per option wants
# ~10 labels per option to be worth keeping
MAX_VECTOR_OPTIONS = 64
RIDGE = 1e-4  # on the bias: an option no label names would otherwise have its bias run off to -inf
CERTIFY_SHARE = 0.4  # of the labels, set aside to certify a fit made on the rest


def logits_of(probabilities) -> np.ndarray:
    return np.log(np.clip(np.asarray(probabilities, dtype=np.float64), 1e-300, None))


def apply(params: dict, probabilities) -> np.ndarray:
    """The probabilities a fit serves: softmax(log p / T + b)."""
    z = logits_of(probabilities) / params.get("temperature", 1.0) + np.asarray(params.get("bias", 0.0))
    z -= z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def fit_one(method: str, z: np.ndarray, y: np.ndarray) -> dict:
    """The parameters of one method fitted by maximum likelihood on logits `z` and labels `y`: a temperature T
    (softmax(z / T)) and, for vector scaling, a bias per option (softmax(z / T + b))."""
    if method == "none":
        return {}
    vector = method == "vector"
    scale, bias = newton(z, y, 1.0, np.zeros(z.shape[1]), fit_bias=vector)
    if vector and scale in (1 / BOUNDS[1], 1 / BOUNDS[0]):  # the temperature held at a bound: the bias refitted there
        scale, bias = newton(z, y, scale, bias, fit_bias=True, fit_scale=False)
    out = {"temperature": float(1 / scale)}
    if vector:
        out["bias"] = (bias - bias.mean()).tolist()  # softmax ignores a shift: the bias is told centred
    return out


def loss(z, onehot, scale, bias) -> float:
    u = scale * z + bias
    u = u - u.max(axis=1, keepdims=True)
    log_p = u - np.log(np.exp(u).sum(axis=1, keepdims=True))
    return float(-(log_p * onehot).sum() / len(z) + RIDGE * (bias**2).sum())


def newton(z, y, scale: float, bias, fit_bias: bool, fit_scale: bool = True, steps: int = 50):
    """Newton's method with a halving line search on the mean NLL of softmax(scale·z + bias), plus a small ridge on
    the bias, the scale kept within the temperature's bounds. The loss is convex in (scale, bias), so this takes a
    few steps; torch's L-BFGS reached the same point several times slower on these few parameters
    (ci/tests/test_fit.py holds Platt scaling to scikit-learn's)."""
    n, k = z.shape
    onehot = np.zeros((n, k))
    onehot[np.arange(n), y] = 1.0
    lo, hi = 1 / BOUNDS[1], 1 / BOUNDS[0]
    bias = np.array(bias, dtype=np.float64)
    current = loss(z, onehot, scale, bias)
    for _ in range(steps):
        u = scale * z + bias
        p = np.exp(u - u.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        step = np.linalg.solve(*derivatives(z, p, onehot, bias, fit_scale, fit_bias)[::-1])
        t, trial = 1.0, np.inf
        while t > 1e-8:
            new_scale = min(max(scale - t * step[0], lo), hi) if fit_scale else scale
            new_bias = bias - t * step[int(fit_scale) :] if fit_bias else bias
            trial = loss(z, onehot, new_scale, new_bias)
            if trial <= current:
                break
            t /= 2
        if not trial <= current:
            break
        scale, bias, gained, current = new_scale, new_bias, current - trial, trial
        if gained < 1e-12:
            break
    return scale, bias


def derivatives(z, p, onehot, bias, fit_scale: bool, fit_bias: bool):
    """The gradient and Hessian of the loss in the fitted parameters ((scale, bias), scale, or bias), using
    Cov_i = diag(p_i) − p_i p_iᵀ, the softmax's Jacobian, per row."""
    n, k = z.shape
    residual = p - onehot
    pz = (p * z).sum(axis=1)
    g_s = np.array([(residual * z).sum() / n])
    h_ss = np.array([[((p * z * z).sum(axis=1) - pz**2).sum() / n]])
    if not fit_bias:
        return g_s, h_ss
    g_b = residual.sum(axis=0) / n + 2 * RIDGE * bias
    h_bb = (np.diag(p.sum(axis=0)) - p.T @ p) / n + 2 * RIDGE * np.eye(k)
    if not fit_scale:
        return g_b, h_bb
    h_sb = (p * z - p * pz[:, None]).sum(axis=0)[None, :] / n
    return np.concatenate([g_s, g_b]), np.block([[h_ss, h_sb], [h_sb.T, h_bb]])


def simplest_within_noise(losses: dict) -> str:
    """The simplest method whose held-out NLL is within one standard error of the best's (the paired difference's
    over the rows): a fit must gain more than the noise of the folds to be kept."""
    best = min(losses, key=lambda m: losses[m].mean())
    for m in losses:  # simplest first
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
    methods = METHODS if p.shape[1] <= MAX_VECTOR_OPTIONS else METHODS[:2]
    out_of_fold = {m: np.empty_like(p) for m in methods}
    for f in range(FOLDS):
        train, test = fold != f, fold == f
        for m in methods:
            out_of_fold[m][test] = apply(fit_one(m, z[train], y[train]), p[test])
    losses = {m: row_losses(out_of_fold[m], y) for m in methods}
    cv = {m: float(losses[m].mean()) for m in methods}
    kept = simplest_within_noise(losses)
    why = (
        "no fit lowered the held-out NLL by more than its noise"
        if kept == "none"
        else f"held-out NLL {cv[kept]:.4f} against {cv['none']:.4f} as served ({FOLDS}-fold cross-validation)"
    )
    if len(methods) < len(METHODS):
        why += f"; vector scaling is tried up to {MAX_VECTOR_OPTIONS} options, not {p.shape[1]}"
    return {
        "kept": kept,
        "why": why,
        "folds": FOLDS,
        "cv_nll": cv,
        "params": fit_one(kept, z, y),
        "held_out": out_of_fold[kept],
    }


def fit_then_certify(probabilities, labels, alpha: float, delta: float, seed: int = 0) -> dict:
    """What a task made from these labels would certify: a seeded CERTIFY_SHARE of the rows set aside first, the
    fit chosen and made on the rest, the certificate read from the set-aside rows' fitted answers — so no label both
    fits and certifies."""
    p = np.asarray(probabilities, dtype=np.float64)
    y = np.asarray(labels, dtype=np.int64)
    order = np.random.default_rng(seed).permutation(len(y))
    set_aside = round(len(y) * CERTIFY_SHARE)
    aside, rest = order[:set_aside], order[set_aside:]
    fit = cross_validate(p[rest], y[rest], seed)
    out = {"fit_rows": len(rest), "certify_rows": len(aside), "seed": seed, "kept": fit["kept"]}
    out |= {"alpha": alpha, "delta": delta}
    if not len(aside) or "params" not in fit:
        reason = fit["why"] if "params" not in fit else "no row to certify on"
        return {**out, "threshold": None, "reason": reason, "baseline": baseline(p)}
    q = apply(fit["params"], p[aside])
    hit = q.argmax(axis=1) == y[aside]
    certificate = certify(q.max(axis=1), hit, p.shape[1], alpha, delta)
    # what the task's answers look like on every labelled row: the drift monitor compares traffic with it
    return {**out, "params": fit["params"], **certificate, "baseline": baseline(apply(fit["params"], p))}
