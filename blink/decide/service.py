"""The decision service every decision entry point uses: check (before admission), then plan (in a worker thread,
unless it is small: `Checked.inline`), queue, one GPU call for the batch, answers.

`/v1/systemone`, `/v1/decisions`, both MCP servers, Gradio's `decide` and the UI go through the same `check` and
`run`, so a decision costs the same whichever wire asks for it. A request that asks for several decisions at once
(a rerank's documents, each its own state) goes through `check_many` and `run_many`: the same steps for each, its
decisions queued together as one request and scored in one call, and it holds one admission place per decision.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from starlette.concurrency import run_in_threadpool

from blink.decide.batching import Batcher, OnItsWay
from blink.decide.planner import Checked, DecisionPlanner, Prepared
from blink.errors import BlinkError, InvalidRequest
from blink.web import metrics
from blink.web.endpoint import Timing


@dataclass
class Decided:
    """A decided request: its answers, and what it was prepared into (the usage figures)."""

    answers: dict
    prepared: Prepared
    cached_tokens: int = 0  # prompt tokens taken from the prefix-state cache
    calibration: dict | None = None  # {"applied", "temperatures"[, "prior"]}: what the answers got
    task: dict | None = None  # {"name", "version", "questions"[, "abstained"]}: the task that served them

    @property
    def input_tokens(self) -> int:
        return self.prepared.input_tokens

    @property
    def image_usage(self) -> dict | None:
        return self.prepared.image_usage


class DecisionService:
    def __init__(
        self,
        planner: DecisionPlanner,
        backend,
        *,
        window_ms: float = 0.0,
        max_batch: int = 16,
        max_queued: int = 64,
        model_name: str = "",
        bulk_call_s: float = 1.0,
        tasks=None,
    ):
        """`planner` checks, plans and answers in this process; `backend.score(plans, caller)` (blink.backend) runs
        one batch and returns one `plan.Scored` per plan. A backend with `parallel` > 1 (vLLM replicas) is sent
        that many requests at once, each on its own, instead of one batch at a time. `bulk_call_s`: the seconds one
        model call of bulk rows (the Batch API's) may take. `tasks`: the tasks served (blink.tasks.served.TaskBook),
        which a body names with `x_task`; None, no tasks."""
        self.planner = planner
        self.tasks = tasks
        self.model_name = model_name  # the served name: the metrics' `model_name`
        parallel = int(getattr(backend, "parallel", 1) or 1)
        # Admission bounds the decisions in flight to max_queued + max_batch (web/admission.py); the queue holds
        # that many, so an admitted decision is never refused after it was planned (a batch run smaller than
        # max_batch leaves more than max_queued waiting). The batcher's own 529 stays as a backstop.
        self.batcher = Batcher(
            backend.score,
            window_ms / 1000.0,
            max_batch,
            max_queued + max_batch,
            concurrency=parallel,
            on=getattr(backend, "passes_thread", None),
            bulk_call_s=bulk_call_s,
        )

    def on_its_way(self) -> OnItsWay:
        """Count a request on its way to the batcher from now until it is queued (`run`) or let go (`release()`, by
        whoever holds the exchange, as it ends: refused, failed, its client gone). An entry point takes it as a
        request comes in, before any thread hop: a window never closes on the first requests of a burst while the
        rest are being read, checked or planned."""
        return self.batcher.on_its_way()

    def check(self, body, parts: dict | None = None, on_its_way: OnItsWay | None = None) -> Checked:
        """Before admission (in a worker thread): everything refusable without tokenizing. `on_its_way` (the
        request's count) goes with the checked decision to its queue."""
        task = None
        if self.tasks is not None:
            body, task = self.tasks.resolve(body)
        elif isinstance(body, dict) and ("x_task" in body or "x_abstain" in body):
            raise InvalidRequest(
                "this server serves no tasks (`x_task`, `x_abstain`): start it with --tasks FILE (docs/tasks.md)",
                loc=["body", "x_task" if "x_task" in body else "x_abstain"],
            )
        checked = self.planner.check(body, parts)
        return replace(checked, on_its_way=on_its_way, task=task)

    async def run(self, checked: Checked, ticket, caller=None, timing: Timing | None = None) -> Decided:
        """An admitted decision: planned under the ticket's preparing bound, queued and batched with other
        requests of the same `caller` (opaque; on the Space their ZeroGPU identity, so their own quota pays),
        answered. A small plan is made on the event loop unless requests are batched across a window: there the
        thread hop lets the loop take in the requests that arrived with this one, so the window has their company."""
        timing = timing or Timing()
        t = time.perf_counter()
        async with ticket.preparing():
            if checked.inline and not self.batcher.window_s:  # cheaper than a thread hop (see below)
                prepared = self.planner.plan(checked)
            else:
                prepared = await run_in_threadpool(self.planner.plan, checked)
        timing.add("prepare", time.perf_counter() - t)
        job = self.batcher.submit(prepared.prompts, caller, prepared.prior_plans, checked.on_its_way)
        scored = await asyncio.wrap_future(job.future)
        timing.add("queue", job.started_at - job.queued_at)
        timing.add("model", scored.compute_s)
        t = time.perf_counter()
        answers = self.planner.answer(prepared, scored.result(), job.extra_scored)
        timing.add("answer", time.perf_counter() - t)
        metrics.decided(self.model_name, prepared.decision.questions, prepared.input_tokens, scored.cached_tokens)
        decided = Decided(answers, prepared, scored.cached_tokens, self.planner.calibration_fact(prepared))
        if checked.task is not None:
            abstain = bool(checked.body.get("x_abstain", False))
            decided.answers, decided.task = self.tasks.answer(
                checked.task, answers, prepared.decision.questions, abstain
            )
        return decided

    def check_many(self, bodies: list, on_its_way: OnItsWay | None = None, at: Refusal | None = None) -> list[Checked]:
        """`check` for each decision of one request; the request's count on its way goes with the first (it ends
        as they are all queued together). `at(i, error)`: a refusal of decision `i` told in the request's terms."""
        checked = []
        for i, body in enumerate(bodies):
            try:
                checked.append(self.planner.check(body, None))
            except BlinkError as error:
                raise (at(i, error) if at is not None else error) from None
        if checked and on_its_way is not None:
            checked[0] = replace(checked[0], on_its_way=on_its_way)
        return checked

    async def run_many(
        self, checked: list[Checked], ticket, caller=None, timing: Timing | None = None, at: Refusal | None = None
    ) -> list:
        """Several admitted decisions of one request (the ticket holds a place for each): planned in one thread hop,
        queued as one request and scored in the same call, answered each on its own, in order. A decision's answer
        is the one it would get alone; a failure of any fails the request. `at(i, error)`: a refusal of decision
        `i`'s plan told in the request's own terms (which document, which field)."""
        timing = timing or Timing()
        t = time.perf_counter()
        try:
            async with ticket.preparing():
                prepared = await run_in_threadpool(self._plan_all, checked, at)
            timing.add("prepare", time.perf_counter() - t)
            items, shared = shared_priors(prepared)
            jobs = self.batcher.submit_many(items, caller, checked[0].on_its_way if checked else None)
        finally:
            for c in checked:  # whatever was not queued is no longer on its way
                if c.on_its_way is not None:
                    c.on_its_way.release()
        scored = await asyncio.gather(*(asyncio.wrap_future(job.future) for job in jobs))
        timing.add("queue", jobs[0].started_at - jobs[0].queued_at)
        timing.add("model", scored[0].compute_s)
        t = time.perf_counter()
        out = []
        for i, (p, s) in enumerate(zip(prepared, scored, strict=True)):
            extra = jobs[shared[i]].extra_scored
            answers = self.planner.answer(p, s.result(), extra)
            out.append(Decided(answers, p, s.cached_tokens, self.planner.calibration_fact(p)))
        timing.add("answer", time.perf_counter() - t)
        return out

    def _plan_all(self, checked: list[Checked], at: Refusal | None) -> list[Prepared]:
        out = []
        for i, one in enumerate(checked):
            try:
                out.append(self.planner.plan(one))
            except BlinkError as error:
                raise (at(i, error) if at is not None else error) from None
        return out


Refusal = Callable[[int, BlinkError], BlinkError]


def shared_priors(prepared: list[Prepared]) -> tuple[list, list[int]]:
    """Each decision's `(prompts, prior plans)` for the batcher, the prior's content-free prompts sent once for
    decisions that ask the same questions (a rerank asks one question of every document), and for each decision
    the index of the one whose prior scores it reads."""
    first: dict = {}
    items, shared = [], []
    for i, p in enumerate(prepared):
        plans = p.prior_plans
        key = tuple(tuple(tuple(prompt.ids) for prompt in plan) for plan in plans)
        owner = first.setdefault(key, i)
        items.append((p.prompts, plans if owner == i else []))
        shared.append(owner)
    return items, shared
