"""How much bulk work (the Batch API's rows) one model call may take: as many prompt tokens as fit in `call_s`
seconds at the speed the bulk calls so far ran at.

The batcher (blink.decide.batching) never puts a bulk row in a call with an interactive request, and takes an
interactive request first whenever one waits; so an interactive decision that arrives while a batch runs waits at
most for the bulk call already running. This module keeps that call short: the first bulk call takes one row (no
speed is known yet), and each call's seconds per token (an exponential average) sizes the next. A per-call cost the
tokens do not explain (a fixed overhead) makes the first small calls look slow per token, so calls grow from below
towards `call_s`, never past it by more than one row's share.
"""

from __future__ import annotations

from blink.plan import Prompt, processed_tokens

SMOOTHING = 0.3  # weight of the latest call in the running seconds-per-token figure


def plan_tokens(plan) -> int:
    """The prompt tokens of one plan (a list of prompts); 1 for anything else (a stand-in plan in a test)."""
    if isinstance(plan, list) and plan and all(isinstance(p, Prompt) for p in plan):
        return max(1, processed_tokens(plan))
    return 1


class BulkPace:
    def __init__(self, call_s: float):
        self.call_s = call_s
        self.s_per_token: float | None = None  # unknown until the first bulk call ends
        self.calls = 0
        self.rows = 0
        self.longest_s = 0.0

    def budget(self) -> float:
        """Tokens the next bulk call may hold (its first row always goes, whatever its size)."""
        if self.s_per_token is None:
            return 0.0  # one row: its time is what the next calls are sized by
        return self.call_s / self.s_per_token

    def record(self, rows: int, tokens: int, seconds: float) -> None:
        """A bulk call of `rows` rows and `tokens` prompt tokens took `seconds`."""
        self.calls += 1
        self.rows += rows
        self.longest_s = max(self.longest_s, seconds)
        rate = seconds / max(1, tokens)
        self.s_per_token = rate if self.s_per_token is None else (1 - SMOOTHING) * self.s_per_token + SMOOTHING * rate

    def stats(self) -> dict:
        return {
            "call_s": self.call_s,
            "calls": self.calls,
            "rows": self.rows,
            "longest_call_s": round(self.longest_s, 4),
            "tokens_per_call": None if self.s_per_token is None else int(self.budget()),
        }
