"""The decision service both wires call: prepare in a worker thread, queue, one GPU call, answers.

`/v1/systemone` and `/v1/decisions` go through the same `decide`, so a decision costs the same
whichever wire asks for it.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Callable

from starlette.concurrency import run_in_threadpool

from .batching import Batcher
from .engine import Engine
from .errors import EngineFailure


@dataclass
class Timing:
    """Phases of one request, for the `server-timing` header (milliseconds)."""

    start: float = field(default_factory=time.perf_counter)
    phases: dict = field(default_factory=dict)

    def add(self, name: str, seconds: float) -> None:
        self.phases[name] = self.phases.get(name, 0.0) + seconds * 1000

    def header(self) -> str:
        parts = [f"{name};dur={ms:.1f}" for name, ms in self.phases.items()]
        parts.append(f"total;dur={(time.perf_counter() - self.start) * 1000:.1f}")
        return ", ".join(parts)


@dataclass
class Decided:
    answers: dict
    input_tokens: int
    batch_size: int
    image_usage: dict | None = None  # image_pixels, visual_tokens (image requests only)
    calibration: dict | None = None  # {"applied", "temperatures"}: what the answers got


class DecisionService:
    def __init__(self, engine: Engine, decide: Callable[[list], dict] | None = None, *, window_ms: float = 0.0,
                 max_batch: int = 16, max_queued: int = 64):
        self.engine = engine
        self.batcher = Batcher(decide or engine.score_many, window_ms / 1000.0, max_batch, max_queued)

    async def decide(self, body, timing: Timing, parts: dict | None = None) -> Decided:
        t = time.perf_counter()
        self.batcher.expect(+1)
        try:
            prepared = await run_in_threadpool(self.engine.prepare, body, parts)
            timing.add("prepare", time.perf_counter() - t)
            job = self.batcher.submit(prepared.prompts)
        finally:
            self.batcher.expect(-1)
        status, scores = await asyncio.wrap_future(job.future)
        timing.add("queue", job.started_at - job.queued_at)
        timing.add("model", job.compute_s)
        if status != "ok":
            raise EngineFailure(f"the model failed on this request: {scores}")
        t = time.perf_counter()
        answers = self.engine.answer(prepared, scores)
        timing.add("answer", time.perf_counter() - t)
        return Decided(answers, prepared.input_tokens, job.batch_size, prepared.image_usage,
                       self.engine.calibration_fact(prepared))
