"""The decision service both wires call: prepare in a worker thread, queue, one GPU call, answers.

`/v1/systemone` and `/v1/decisions` go through the same `decide`, so a decision costs the same
whichever wire asks for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.concurrency import run_in_threadpool

from .batching import Batcher
from .engine import Engine, Prepared


@dataclass
class Timing:
    """Phases of one request, for the `server-timing` header (milliseconds)."""

    start: float = field(default_factory=time.perf_counter)
    phases: dict = field(default_factory=dict)

    def add(self, name: str, seconds: float) -> None:
        self.phases[name] = self.phases.get(name, 0.0) + seconds * 1000

    def header(self) -> str:
        parts = [f"{name};dur={ms:.2f}" for name, ms in self.phases.items()]
        parts.append(f"total;dur={(time.perf_counter() - self.start) * 1000:.2f}")
        return ", ".join(parts)


@dataclass
class Decided:
    """A decided request: its answers, and what it was prepared into (the usage figures)."""

    answers: dict
    prepared: Prepared
    cached_tokens: int = 0  # prompt tokens taken from the prefix-state cache
    calibration: dict | None = None  # {"applied", "temperatures"}: what the answers got

    @property
    def input_tokens(self) -> int:
        return self.prepared.input_tokens

    @property
    def image_usage(self) -> dict | None:
        return self.prepared.image_usage


class DecisionService:
    def __init__(
        self,
        engine: Engine,
        score_batch: Callable[[list, Any], list] | None = None,
        *,
        window_ms: float = 0.0,
        max_batch: int = 16,
        max_queued: int = 64,
    ):
        """`score_batch(plans, caller)` runs one batch and returns one `plan.Scored` per plan (default: the
        engine in this process, where the caller is moot; the Space: its `@spaces.GPU` call, as the caller)."""
        self.engine = engine
        self.batcher = Batcher(
            score_batch or (lambda plans, caller: engine.score_many(plans)), window_ms / 1000.0, max_batch, max_queued
        )

    async def decide(self, body, timing: Timing, parts: dict | None = None, caller=None, ticket=None) -> Decided:
        """The engine's prepare -> score -> answer, with the score step queued and batched with other
        requests of the same `caller` (opaque; on the Space their ZeroGPU identity, so their own quota pays).
        `ticket`: the admission place the request holds; its `preparing()` bounds how many prepare at once."""
        t = time.perf_counter()
        self.batcher.expect(+1)
        try:
            async with ticket.preparing() if ticket is not None else contextlib.nullcontext():
                prepared = await run_in_threadpool(self.engine.prepare, body, parts)
            timing.add("prepare", time.perf_counter() - t)
            job = self.batcher.submit(prepared.prompts, caller)
        finally:
            self.batcher.expect(-1)
        scored = await asyncio.wrap_future(job.future)
        timing.add("queue", job.started_at - job.queued_at)
        timing.add("model", scored.compute_s)
        t = time.perf_counter()
        answers = self.engine.answer(prepared, scored.result())
        timing.add("answer", time.perf_counter() - t)
        return Decided(answers, prepared, scored.cached_tokens, self.engine.calibration_fact(prepared))
