"""How many GPU seconds a call asks ZeroGPU for, learned from the compute times the calls report.

ZeroGPU admits a call against the caller's remaining quota by the duration it *requests* (quota is then
charged for actual use), and shorter requests queue ahead of longer ones; a call that runs past its request
may be aborted. So each call asks for what its work plausibly needs, and no more:

    seconds = ceil(cold + overhead + headroom * (prefill(prompt tokens) + decode_tokens * decode_rate))

clamped to [min_s, max_s], a whole number >= 1 (`spaces` floors floats and wraps negatives).

What the platform then does with those seconds (`Charge`, read from `spaces`' own configuration on ZeroGPU):
a `large` call is scheduled for `round(requested x duration_factor)` seconds (1.5 on the RTX PRO 6000 Blackwell
cards ZeroGPU runs on since 2026-05, 1.0 on the H200), an `xlarge` call for its requested seconds, charged twice.
The estimate is calibrated in seconds used on the card itself, so a call asks for the seconds that make what is
*scheduled* cover its need (`need / factor` on `large`), and the caps (`min_s`, `max_s`, a call's `max_s`) bound
what is scheduled and charged, after the factor: a call never asks for more than the platform's maximum.

- `prefill(tokens) = fixed + per_token * tokens`, a least-squares line through the recent calls (weights
  fading by `1 - alpha` per call). A line, not a mean of seconds-per-token: on a GPU a small call is mostly
  fixed cost (kernel launches), and a per-token mean learned from many small calls would ask a rare large
  call for several times its work.
- `decode_rate` (chat) is a running mean of what a turn took past its predicted prefill, per new token.
- Both start from a conservative prior that fades as calls report; a call slower than predicted weighs more
  (an aborted call costs more than a long request), and after any call the estimate for that same work is
  never below the time it measured (unless that is past `max_s`).
- `cold_s` is added until a call has succeeded, and again after a failed one: ZeroGPU forks a fresh worker
  then, which moves the weights to the GPU and compiles its kernels before our function runs.

Pure Python on purpose: the Space's duration callables run in the main process before every GPU call.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

from blink.settings import SpaceSettings
from blink.web import metrics

SPACE = SpaceSettings()  # the defaults: blink/settings.py declares them, once


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


class CostLine:
    """Seconds ~ fixed + per_token * tokens: weighted least squares over the calls seen, older calls fading.

    Two pseudo-calls shape it: the prior, one call of 1,000 tokens at `per_token` (weight `prior_weight`,
    fading like the data), and an anchor at (0 tokens, 0 s) that never fades (weight 1, against ~10 for the
    recent calls), so a line seen from calls of one size only still goes through the origin instead of
    swinging about stale points. Both coefficients stay >= 0. `lift` (seconds per token) is the extra that
    keeps the prediction at or above a just-measured call; it fades like the data."""

    ANCHOR_WEIGHT = 1.0

    def __init__(self, per_token: float, prior_weight: float = 2.0, alpha: float = 0.1, up_weight: float = 5.0):
        self.keep, self.up_weight = 1.0 - alpha, up_weight
        self.sums = [0.0] * 5  # weight, x, y, x*x, x*y
        self._add(1_000.0, per_token * 1_000.0, prior_weight)
        self.fixed, self.per_token, self.lift = 0.0, per_token, 0.0
        self.observations = 0
        self._solve()

    def predict(self, tokens: int) -> float:
        return self.fixed + (self.per_token + self.lift) * tokens

    def update(self, tokens: int, seconds: float, floor: float) -> None:
        """One call's measurement; afterwards `predict(tokens) >= floor` (the caller's measured need)."""
        weight = self.up_weight if seconds > self.predict(tokens) else 1.0
        self.sums = [s * self.keep for s in self.sums]
        self._add(float(tokens), seconds, weight)
        self.lift *= self.keep
        self._solve()
        if tokens and self.predict(tokens) < floor:
            self.lift += (floor - self.predict(tokens)) / tokens * (1 + 1e-9)
        self.observations += 1

    def _add(self, x: float, y: float, w: float) -> None:
        for i, v in enumerate((1.0, x, y, x * x, x * y)):
            self.sums[i] += w * v

    def _solve(self) -> None:
        w, sx, sy, sxx, sxy = self.sums
        w += self.ANCHOR_WEIGHT  # the (0, 0) anchor adds weight only
        det = w * sxx - sx * sx
        if det > 1e-9 * w * sxx:
            per_token = (w * sxy - sx * sy) / det
            fixed = (sy - per_token * sx) / w
        else:  # every call the same size: no slope to fit
            fixed, per_token = -1.0, 0.0
        if fixed < 0:  # through the origin
            fixed, per_token = 0.0, sxy / sxx
        if per_token < 0:  # bigger calls measured faster (noise): a flat line at the mean
            fixed, per_token = sy / w, 0.0
        self.fixed, self.per_token = fixed, per_token


@dataclass(frozen=True)
class Charge:
    """What the platform makes of a call's requested seconds: `size` is the size the call gets (`large`, half a
    card, or `xlarge`, the whole card), `factor` the card's `duration_factor` (applied to `large` calls only),
    `setting` what the Space asked for (`large`, `xlarge` or `auto`: the platform's own rule, `xlarge` past
    `threshold_bytes` of packed weights), `source` where the figures come from (`platform`: `spaces`' own
    configuration for this card; `assumed`: not on ZeroGPU, nothing is charged)."""

    size: str = "large"
    factor: float = 1.0
    setting: str = "large"
    card: str | None = None
    threshold_bytes: int | None = None
    source: str = "assumed"

    @property
    def multiplier(self) -> float:
        """Quota seconds charged per requested second."""
        return 2.0 if self.size == "xlarge" else self.factor

    def scheduled_s(self, requested: int) -> int:
        """The seconds the scheduler is sent, which the call may run (`spaces`' get_duration_seconds, rounded)."""
        return int(round(int(requested) * (1.0 if self.size == "xlarge" else self.factor)))

    def charged_s(self, requested: int) -> int:
        """The quota seconds the call is admitted against: what is scheduled, twice on `xlarge`."""
        return self.scheduled_s(requested) * (2 if self.size == "xlarge" else 1)

    def request_for(self, need_s: int) -> int:
        """The fewest whole seconds (>= 1) whose scheduled seconds cover `need_s`."""
        per = 1.0 if self.size == "xlarge" else self.factor
        requested = max(1, math.floor(int(need_s) / per)) if per > 0 else max(1, int(need_s))
        while self.scheduled_s(requested) < need_s:  # the platform rounds: start below, walk up
            requested += 1
        return requested

    def most_for(self, cap_s: int) -> int:
        """The most whole seconds (>= 1) whose charge stays within `cap_s`."""
        requested = max(1, math.floor(int(cap_s) / self.multiplier)) if self.multiplier > 0 else max(1, int(cap_s))
        while self.charged_s(requested + 1) <= cap_s:  # the platform rounds half to even: walk both ways
            requested += 1
        while requested > 1 and self.charged_s(requested) > cap_s:
            requested -= 1
        return requested

    def as_dict(self) -> dict:
        return {
            "size": self.size,
            "setting": self.setting,
            "duration_factor": self.factor,
            "charged_per_requested_s": self.multiplier,
            "card": self.card,
            "xlarge_threshold_bytes": self.threshold_bytes,
            "source": self.source,
        }

    def describe(self) -> str:
        """One line for people: the size, the card, how a call is charged."""
        card = f" on {self.card}" if self.card else ""
        how = f"(`{self.setting}`: the platform's rule)" if self.setting == "auto" else ""
        if self.size == "xlarge":
            rule = "a call that asks N s is scheduled for N s and charged 2 x N s of quota"
        else:
            rule = f"a call that asks N s is scheduled and charged {self.factor:g} x N s"
        return f"ZeroGPU `{self.size}` {how}{card}: {rule}".replace("  ", " ")


@dataclass
class Ledger:
    """Requested vs charged vs used GPU seconds for one kind of call (for /healthz)."""

    calls: int = 0
    requested_s: float = 0.0
    charged_s: float = 0.0
    used_s: float = 0.0
    wall_s: float = 0.0
    last_requested_s: int | None = None
    last_scheduled_s: int | None = None
    last_charged_s: int | None = None
    last_used_s: float | None = None
    over_requested: int = 0  # calls whose compute ran past what was scheduled for them

    def as_dict(self) -> dict:
        return {
            "calls": self.calls,
            "requested_s": round(self.requested_s, 3),
            "charged_s": round(self.charged_s, 3),
            "used_s": round(self.used_s, 3),
            "wall_s": round(self.wall_s, 3),
            "last_requested_s": self.last_requested_s,
            "last_scheduled_s": self.last_scheduled_s,
            "last_charged_s": self.last_charged_s,
            "last_used_s": None if self.last_used_s is None else round(self.last_used_s, 3),
            "over_requested": self.over_requested,
        }


class DurationEstimator:
    def __init__(
        self,
        *,
        prefill_s_per_token: float = SPACE.prefill_s_per_token,
        decode_s_per_token: float = SPACE.decode_s_per_token,
        overhead_s: float = SPACE.duration_overhead_s,
        headroom: float = SPACE.duration_headroom,
        min_s: int = SPACE.duration_min_s,
        max_s: int = SPACE.chat_duration_max_s,
        cold_s: float = 0.0,
        prior_weight: float = 2.0,
        alpha: float = 0.1,
        charge=Charge,
    ):
        """`cold_s` is 0 here (a bare estimator starts warm); a Space passes its own (`configured`). `charge`:
        a callable giving the platform's `Charge` for the next call (the size `auto` resolves to is only known
        once the platform has packed the weights, at launch)."""
        if not (1 <= int(min_s) <= int(max_s)):
            raise ValueError(f"duration bounds must satisfy 1 <= min_s <= max_s, got {min_s}, {max_s}")
        if headroom < 1.0 or overhead_s < 0 or cold_s < 0 or prefill_s_per_token <= 0 or decode_s_per_token <= 0:
            raise ValueError("headroom must be >= 1, the overhead and cold allowance >= 0 and the prior rates > 0")
        self.min_s, self.max_s = int(min_s), int(max_s)
        self.overhead_s, self.cold_s = float(overhead_s), float(cold_s)
        self.headroom = float(headroom)
        self.prefill = CostLine(float(prefill_s_per_token), prior_weight, alpha)
        self.decode = Rate(float(decode_s_per_token), prior_weight, alpha)
        self.warm = False  # a call has succeeded since start-up or the last failure
        self.ledgers: dict[str, Ledger] = {}
        self.charge = charge
        self._lock = threading.Lock()

    # the estimate ----------------------------------------------------------------------------------------
    def work_s(self, prefill_tokens: int, decode_tokens: int = 0) -> float:
        """Seconds of GPU work predicted for these token counts."""
        p, d = max(0, int(prefill_tokens)), max(0, int(decode_tokens))
        return self.prefill.predict(p) + d * self.decode.value

    def need_s(self, prefill_tokens: int, decode_tokens: int = 0) -> float:
        """Unclamped seconds the work plausibly needs (cold allowance, overhead and headroom included)."""
        cold = 0.0 if self.warm else self.cold_s
        return cold + self.overhead_s + self.headroom * self.work_s(prefill_tokens, decode_tokens)

    def seconds(
        self, prefill_tokens: int, decode_tokens: int = 0, max_s: int | None = None, charge: Charge | None = None
    ) -> int:
        """The whole seconds to request (an int >= 1): the need, ceil, clamped to [min_s, max_s] in seconds
        scheduled and charged; with a `charge`, converted to what the call asks so that the platform schedules
        the need and charges no more than the cap."""
        cap = self.max_s if max_s is None else max(self.min_s, min(int(max_s), self.max_s))
        need = self.need_s(prefill_tokens, decode_tokens)
        scheduled = cap if not math.isfinite(need) else int(min(cap, max(self.min_s, math.ceil(need - 1e-9))))
        if charge is None:
            return scheduled
        return max(1, min(charge.request_for(scheduled), charge.most_for(cap)))

    # calibration -----------------------------------------------------------------------------------------
    def observe(self, prefill_tokens: int, decode_tokens: int, compute_s: float) -> None:
        """Learn from one successful call's measured compute time (GPU work, excluding queueing)."""
        p, d = max(0, int(prefill_tokens)), max(0, int(decode_tokens))
        if not (isinstance(compute_s, (int, float)) and math.isfinite(compute_s)) or compute_s < 0 or p + d == 0:
            return
        with self._lock:
            self.warm = True
            floor = compute_s / self.headroom  # the work estimate that makes need_s >= compute_s
            if d == 0:
                self.prefill.update(p, compute_s, floor)
                return
            self.decode.update(max(compute_s - self.prefill.predict(p), 0.0) / d)
            shortfall = floor - self.work_s(p, d)
            if shortfall > 0:  # never below what this turn measured
                self.decode.value += shortfall / d * (1 + 1e-9)

    def failed(self) -> None:
        """A call failed: the next one starts a fresh worker (ZeroGPU does not reuse a failed one)."""
        with self._lock:
            self.warm = False

    # accounting ------------------------------------------------------------------------------------------
    def ledger(self, kind: str) -> Ledger:
        with self._lock:
            return self.ledgers.setdefault(kind, Ledger())

    def requested(self, kind: str, seconds: int, charge: Charge | None = None) -> None:
        """A call asked for `seconds`; with `charge`, what the platform schedules and charges for them."""
        ledger = self.ledger(kind)
        scheduled = seconds if charge is None else charge.scheduled_s(seconds)
        charged = seconds if charge is None else charge.charged_s(seconds)
        with self._lock:
            ledger.calls += 1
            ledger.requested_s += seconds
            ledger.charged_s += charged
            ledger.last_requested_s = int(seconds)
            ledger.last_scheduled_s = int(scheduled)
            ledger.last_charged_s = int(charged)
        metrics.GPU_REQUESTED.labels(kind).inc(seconds)
        metrics.GPU_CHARGED.labels(kind).inc(charged)

    def used(self, kind: str, compute_s: float, wall_s: float | None = None) -> None:
        ledger = self.ledger(kind)
        with self._lock:
            ledger.used_s += compute_s
            ledger.last_used_s = compute_s
            if wall_s is not None:
                ledger.wall_s += wall_s
            if ledger.last_scheduled_s is not None and compute_s > ledger.last_scheduled_s:
                ledger.over_requested += 1
        metrics.GPU_USED.labels(kind).inc(max(0.0, compute_s))

    def health(self) -> dict:
        charge = self.charge()
        with self._lock:
            return {
                "charge": charge.as_dict(),
                "bounds_s": [self.min_s, self.max_s],
                "overhead_s": self.overhead_s,
                "headroom": self.headroom,
                "cold_s": self.cold_s,
                "warm": self.warm,
                "prefill_fixed_s": self.prefill.fixed,
                "prefill_s_per_token": self.prefill.per_token + self.prefill.lift,
                "decode_s_per_token": self.decode.value,
                "calibrated_from": {"prefill": self.prefill.observations, "decode": self.decode.observations},
                **{kind: ledger.as_dict() for kind, ledger in self.ledgers.items()},
            }


def configured(space: SpaceSettings, charge=Charge) -> DurationEstimator:
    """The estimator as a Space configures it. Its cap is the larger of the decision and chat caps (each call
    passes its own); `charge` gives the platform's charge for the next call."""
    return DurationEstimator(
        charge=charge,
        prefill_s_per_token=space.prefill_s_per_token,
        decode_s_per_token=space.decode_s_per_token,
        overhead_s=space.duration_overhead_s,
        cold_s=space.duration_cold_s,
        headroom=space.duration_headroom,
        min_s=space.duration_min_s,
        max_s=max(space.duration_max_s, space.chat_duration_max_s),
    )


def replay(calls: list[tuple[int, float]], estimator: DurationEstimator, long_s: float = 1.0) -> dict:
    """Duration honesty over recorded decision calls `(prefill tokens, compute seconds)`, in order: what each
    would have requested before it ran, against what it used. `long` sums the calls over `long_s` of work
    (the issue's target: requested <= 2x used there); `cut_off` counts calls that used more than they asked."""
    asked_all = used_all = asked_long = used_long = 0.0
    worst_long, cut, n_long = 0.0, 0, 0
    for tokens, compute_s in calls:
        asked = estimator.seconds(tokens)
        asked_all, used_all, cut = asked_all + asked, used_all + compute_s, cut + (compute_s > asked)
        if compute_s > long_s:
            n_long += 1
            asked_long, used_long = asked_long + asked, used_long + compute_s
            worst_long = max(worst_long, asked / compute_s)
        estimator.observe(tokens, 0, compute_s)
    ratio = lambda a, u: a / u if u else math.nan  # noqa: E731
    return {
        "calls": len(calls),
        "requested_s": asked_all,
        "used_s": used_all,
        "ratio": ratio(asked_all, used_all),
        "cut_off": cut,
        "long_s": long_s,
        "long_calls": n_long,
        "long_requested_s": asked_long,
        "long_used_s": used_long,
        "long_ratio": ratio(asked_long, used_long),
        "long_worst": worst_long,
    }
