"""Watching a task's traffic: has it moved away from the labelled rows its certificate was read from?

Two signals per question, each O(1) in the answers seen (O(options) per answer):

- **the answer mix**: the share of each answer over the last `WINDOW` answers against the task's own (its labelled
  rows, answered with its fit), as a total variation distance. Its alarm line is the (1 − `MIX_RATE`) quantile of the
  same distance over `RESAMPLES` windows, each drawn twice from the task's rows (a mix like theirs, then a window
  from that mix): a window of traffic like the labels is over the line in 1 check of 10,000.
- **falling confidence**: a one-sided Bernoulli CUSUM on the answers less confident than the task's 5th percentile.
  Traffic like the labels has 5 % of them, known only from the labelled rows: the CUSUM takes the share as the upper
  95 % (Wilson) bound of that 5 % over those rows, p0, and is tuned to see twice it (a log-likelihood ratio per
  answer, reset at zero); it alarms past log(1 / `CONFIDENCE_RATE`): by Wald's bound a stationary stream crosses it
  less than once in 10,000 answers on average. Out-of-scope traffic shows here first: it lowers confidence before it
  moves the mix. Fewer labelled rows make p0 larger and the signal slower, never falsely quick.

Only counts are kept, never a state. The task's `baseline` (what the signals compare with) is written when it is
fitted (`baseline`).
"""

from __future__ import annotations

import math

import numpy as np

WINDOW = 500  # answers in the mix's window
RESAMPLES = 50_000  # windows drawn from the task's mix to set its alarm line
CHUNK_CELLS = 2_000_000  # draws x options made at once (a question of 255 options: 7,843 draws a step)
MIX_RATE = 1e-4  # a window like the labels is over the line this often
LOW_SHARE = 0.05  # of the labelled rows' answers, the share below the low-confidence line (its 5th percentile)
SHIFT = 2.0  # the CUSUM is tuned to catch this many times the share of low-confidence answers
Z = 1.645  # the Wilson bound's: one-sided 95 %
CONFIDENCE_RATE = 1e-4  # the CUSUM's line is log(1 / this)


def baseline(probabilities) -> dict:
    """What a task's answers looked like on its labelled rows (`probabilities`: each row's, after the task's fit):
    each option's share of the answers and the 5th percentile of their confidence."""
    p = np.asarray(probabilities, dtype=np.float64)
    answers = np.bincount(p.argmax(axis=1), minlength=p.shape[1])
    return {
        "rows": len(p),
        "mix": (answers / max(len(p), 1)).tolist(),
        "low_confidence": float(np.quantile(p.max(axis=1), LOW_SHARE)) if len(p) else 0.0,
    }


def mix_line(mix, rows: int, window: int = WINDOW, rate: float = MIX_RATE, seed: int = 0) -> float:
    """The total variation distance from `mix` (read from `rows` labelled rows) that a window of `window` answers of
    traffic like those rows exceeds with probability `rate`. Drawn twice: the traffic's own mix from the rows (the
    task knows its mix only from them), then the window from that mix."""
    m = np.asarray(mix, dtype=np.float64)
    m = m / m.sum()
    rng = np.random.default_rng(seed)
    step = max(1, CHUNK_CELLS // len(m))  # draws at once: a few arrays of step x options, ~16 MB each at most
    distances = []
    for start in range(0, RESAMPLES, step):
        draws = min(step, RESAMPLES - start)
        truth = rng.multinomial(max(rows, 1), m, size=draws) / max(rows, 1)
        seen = rng.multinomial(window, truth) / window
        distances.append(0.5 * np.abs(seen - m).sum(axis=1))
    return float(np.quantile(np.concatenate(distances), 1 - rate))


def wilson_upper(share: float, n: int) -> float:
    """The upper one-sided 95 % Wilson bound of a share seen in n rows."""
    n = max(n, 1)
    centre = share + Z * Z / (2 * n)
    spread = Z * math.sqrt(share * (1 - share) / n + Z * Z / (4 * n * n))
    return (centre + spread) / (1 + Z * Z / n)


class Monitor:
    """One question's signals, fed each answer (`add`) as it is served."""

    def __init__(self, base: dict, window: int = WINDOW):
        self.mix = np.asarray(base["mix"], dtype=np.float64)
        self.low = base["low_confidence"]
        self.window = window
        self.line = mix_line(self.mix, base["rows"], window) if self.mix.sum() > 0 else math.inf
        self.recent = np.full(window, -1, dtype=np.int64)  # a ring of the last answers' options
        self.counts = np.zeros(len(self.mix), dtype=np.int64)  # of the ring
        self.answered = np.zeros(len(self.mix), dtype=np.int64)  # since start
        self.seen = 0
        self.distance = 0.0
        self.cusum = 0.0
        self.cusum_line = math.log(1 / CONFIDENCE_RATE)
        self.share = wilson_upper(LOW_SHARE, base["rows"])  # of low-confidence answers in traffic like the labels
        shifted = min(SHIFT * self.share, 0.99)
        self.step_low = math.log(shifted / self.share)
        self.step_sure = math.log((1 - shifted) / (1 - self.share))
        self.alarms = {"mix": 0, "confidence": 0}  # how many times each signal has crossed its line
        self.alarming = {"mix": False, "confidence": False}

    def add(self, option: int, confidence: float) -> None:
        at = self.seen % self.window
        if self.seen >= self.window:
            self.counts[self.recent[at]] -= 1
        self.recent[at] = option
        self.counts[option] += 1
        self.answered[option] += 1
        self.seen += 1
        if self.seen >= self.window:
            self.distance = 0.5 * float(np.abs(self.counts / self.window - self.mix).sum())
        self.cusum = max(0.0, self.cusum + (self.step_low if confidence < self.low else self.step_sure))
        self._alarm("mix", self.distance > self.line)
        self._alarm("confidence", self.cusum > self.cusum_line)

    def _alarm(self, signal: str, now: bool) -> None:
        if now and not self.alarming[signal]:
            self.alarms[signal] += 1
        self.alarming[signal] = now

    @property
    def drifting(self) -> bool:
        return any(self.alarming.values())

    def state(self) -> dict:
        full = self.seen >= self.window
        return {
            "answers": self.seen,
            "mix": {
                "distance": self.distance if full else None,
                "line": self.line,
                "window": self.window,
                "alarming": self.alarming["mix"],
                "alarms": self.alarms["mix"],
                "note": None if full else f"{self.window - self.seen} answers until the window is full",
            },
            "confidence": {
                "cusum": self.cusum,
                "line": self.cusum_line,
                "below": self.low,
                "share": self.share,
                "alarming": self.alarming["confidence"],
                "alarms": self.alarms["confidence"],
            },
        }
