"""How many GPU seconds a call asks ZeroGPU for, learned from the compute times the calls report.

ZeroGPU admits a call against the caller's remaining quota by the duration it *requests*, and shorter
requests queue ahead of longer ones; a call that runs past its request may be aborted. So each call asks
for what its work plausibly needs:

    seconds = ceil(overhead + headroom * (prefill_tokens * prefill_rate + decode_tokens * decode_rate))

clamped to [min_s, max_s] and always a whole number >= 1 (`spaces` floors floats and wraps negatives).

The two rates (seconds per token) start from a conservative prior and follow the compute times the GPU
calls report: decisions (prefill only) calibrate `prefill_rate`; chat turns calibrate `decode_rate` from
what is left after their prefill. The running mean weighs the prior like `prior_weight` observations, then
becomes an exponential average (`alpha`); a slower-than-expected call moves the rate up at once (an
aborted call costs more than a slightly long request). After any observation the estimate for that same
work is never below the compute time it measured (unless that is past `max_s`).

Pure Python on purpose: the Space's duration callables run in the main process before every GPU call.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass


@dataclass
class Rate:
    """Seconds per token, a running mean that starts at a prior."""

    value: float
    prior_weight: float = 2.0
    alpha: float = 0.1
    alpha_up: float = 0.5
    observations: int = 0

    def update(self, sample: float) -> None:
        weight = max(1.0 / (self.observations + self.prior_weight), self.alpha)
        if sample > self.value:
            weight = max(weight, self.alpha_up)
        self.value += weight * (sample - self.value)
        self.observations += 1


@dataclass
class Ledger:
    """Requested vs used GPU seconds for one kind of call (for /healthz)."""

    calls: int = 0
    requested_s: float = 0.0
    used_s: float = 0.0
    wall_s: float = 0.0
    last_requested_s: int | None = None
    last_used_s: float | None = None
    over_requested: int = 0  # calls whose compute ran past what they asked for

    def as_dict(self) -> dict:
        return {"calls": self.calls, "requested_s": round(self.requested_s, 3), "used_s": round(self.used_s, 3),
                "wall_s": round(self.wall_s, 3), "last_requested_s": self.last_requested_s,
                "last_used_s": None if self.last_used_s is None else round(self.last_used_s, 3),
                "over_requested": self.over_requested}


class DurationEstimator:
    def __init__(self, *, prefill_s_per_token: float = 1e-3, decode_s_per_token: float = 0.08,
                 overhead_s: float = 4.0, headroom: float = 1.5, min_s: int = 5, max_s: int = 120,
                 prior_weight: float = 2.0, alpha: float = 0.1):
        if not (1 <= int(min_s) <= int(max_s)):
            raise ValueError(f"duration bounds must satisfy 1 <= min_s <= max_s, got {min_s}, {max_s}")
        if headroom < 1.0 or overhead_s < 0 or prefill_s_per_token <= 0 or decode_s_per_token <= 0:
            raise ValueError("headroom must be >= 1, the overhead >= 0 and the prior rates > 0")
        self.min_s, self.max_s = int(min_s), int(max_s)
        self.overhead_s = float(overhead_s)
        self.headroom = float(headroom)
        self.prefill = Rate(float(prefill_s_per_token), prior_weight, alpha)
        self.decode = Rate(float(decode_s_per_token), prior_weight, alpha)
        self.ledgers: dict[str, Ledger] = {}
        self._lock = threading.Lock()

    # the estimate ----------------------------------------------------------------------------------------
    def need_s(self, prefill_tokens: int, decode_tokens: int = 0) -> float:
        """Unclamped seconds the work plausibly needs (overhead and headroom included)."""
        work = max(0, int(prefill_tokens)) * self.prefill.value + max(0, int(decode_tokens)) * self.decode.value
        return self.overhead_s + self.headroom * work

    def seconds(self, prefill_tokens: int, decode_tokens: int = 0, max_s: int | None = None) -> int:
        """The whole seconds to request: ceil, clamped to [min_s, max_s], an int >= 1."""
        cap = self.max_s if max_s is None else max(self.min_s, min(int(max_s), self.max_s))
        need = self.need_s(prefill_tokens, decode_tokens)
        if not math.isfinite(need):
            return cap
        return int(min(cap, max(self.min_s, math.ceil(need - 1e-9))))

    # calibration -----------------------------------------------------------------------------------------
    def observe(self, prefill_tokens: int, decode_tokens: int, compute_s: float) -> None:
        """Learn from one call's measured compute time (seconds the GPU work took, excluding queueing)."""
        p, d = max(0, int(prefill_tokens)), max(0, int(decode_tokens))
        if not (isinstance(compute_s, (int, float)) and math.isfinite(compute_s)) or compute_s < 0 or p + d == 0:
            return
        with self._lock:
            if d == 0:
                self.prefill.update(compute_s / p)
            else:
                decode_time = compute_s - p * self.prefill.value
                self.decode.update(max(decode_time, 0.0) / d)
            # never below what this work measured: raise the rate that carries it if needed
            shortfall = compute_s - self.need_s(p, d)
            if shortfall > 0:
                rate, tokens = (self.decode, d) if d else (self.prefill, p)
                rate.value += shortfall / (self.headroom * tokens) * (1 + 1e-9)

    # accounting ------------------------------------------------------------------------------------------
    def ledger(self, kind: str) -> Ledger:
        with self._lock:
            return self.ledgers.setdefault(kind, Ledger())

    def requested(self, kind: str, seconds: int) -> None:
        ledger = self.ledger(kind)
        with self._lock:
            ledger.calls += 1
            ledger.requested_s += seconds
            ledger.last_requested_s = int(seconds)

    def used(self, kind: str, compute_s: float, wall_s: float | None = None) -> None:
        ledger = self.ledger(kind)
        with self._lock:
            ledger.used_s += compute_s
            ledger.last_used_s = compute_s
            if wall_s is not None:
                ledger.wall_s += wall_s
            if ledger.last_requested_s is not None and compute_s > ledger.last_requested_s:
                ledger.over_requested += 1

    def health(self) -> dict:
        with self._lock:
            return {
                "bounds_s": [self.min_s, self.max_s], "overhead_s": self.overhead_s, "headroom": self.headroom,
                "prefill_s_per_token": self.prefill.value, "decode_s_per_token": self.decode.value,
                "calibrated_from": {"prefill": self.prefill.observations, "decode": self.decode.observations},
                **{kind: ledger.as_dict() for kind, ledger in self.ledgers.items()},
            }
