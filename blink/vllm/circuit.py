"""One replica's circuit breaker: closed (requests go to it), open (none do), half-open (one trial request).

- closed -> open: a real request could not reach the replica or timed out (it is gone or hung: at once), or
  `threshold` real requests in a row failed otherwise (a 5xx, 429); or its `/health` failed.
- open -> half-open: once its open time is over and its `/health` answers 200, the background check sends one trial
  request (a one-token completion). A `/health` 200 alone never closes it: a replica can answer `/health` while
  failing every real request.
- half-open -> closed: the trial, or any real request, succeeded. half-open -> open: the trial failed; the open
  time doubles with each opening in a row (`backoff_s` up to `max_backoff_s`) and starts again once it closes.

Not thread-safe: `Replicas` holds its lock around every call.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"
STATES = (CLOSED, OPEN, HALF_OPEN)


@dataclass
class Circuit:
    threshold: int = 3  # consecutive failures (other than unreachable or timed out) that open it
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    state: str = CLOSED
    failures: int = 0  # consecutive failures of real requests
    openings: int = 0  # consecutive openings (since it was last closed)
    open_until: float = 0.0  # time.monotonic(): when a trial may be sent
    transitions: dict = field(default_factory=lambda: dict.fromkeys(STATES, 0))

    def _enter(self, state: str) -> str | None:
        if state == self.state:
            return None
        self.state = state
        self.transitions[state] += 1
        return state

    def succeeded(self) -> str | None:
        """A real request or the trial succeeded: closed. Returns the state entered, if it changed."""
        self.failures = self.openings = 0
        return self._enter(CLOSED)

    def failed(self, at_once: bool, now: float | None = None) -> str | None:
        """A real request failed; `at_once`: it could not reach the replica or timed out."""
        self.failures += 1
        if at_once or self.failures >= self.threshold or self.state != CLOSED:
            return self.open(now)
        return None

    def open(self, now: float | None = None) -> str | None:
        """Opened (again: a failed trial, a failed /health): no request until its open time is over."""
        now = time.monotonic() if now is None else now
        if self.state == OPEN and now < self.open_until:
            return None  # already open: its open time stands
        self.openings += 1
        self.open_until = now + min(self.max_backoff_s, self.backoff_s * 2 ** (self.openings - 1))
        return self._enter(OPEN)

    def trial_due(self, now: float) -> bool:
        return self.state == OPEN and now >= self.open_until

    def half_open(self) -> str | None:
        return self._enter(HALF_OPEN)

    def retry_in_s(self, now: float) -> float:
        return max(0.0, self.open_until - now) if self.state == OPEN else 0.0
