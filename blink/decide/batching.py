"""Cross-request batching: one thread owns the GPU calls for decisions.

Requests are queued (bounded: a full queue is refused with 529 + Retry-After, never left to time out);
the thread takes the next waiting request, keeps collecting for `window` seconds or until `max_batch`
requests charged to the same quota, and scores them all in ONE call of `score(plans, caller)` (the backend's,
blink.backend: in this process, the Space's `@spaces.GPU` function as that caller, or vLLM replicas). It returns
one result per plan, which goes to that request's future as it is: each request still gets its own answers or its
own error. With a window of 0 it serves one request per call.

Which request is next is fair between callers (their `Caller.key`, blink.web.callers), by the decisions each asks
for (blink.web.fair_queue), not first come first served: a caller with one decision waiting goes into the next
batch, not behind another caller's backlog of admitted requests, which would otherwise cost it the same wait the
admission gate spared it.

With `concurrency` > 1 (a backend that batches on its own side, as vLLM replicas do continuously) the thread hands
each request to one of `concurrency` workers and takes the next at once: every replica is kept busy, and a slow
or hung one holds only the requests sent to it, never the ones behind them.

With `on` (the process's compute thread, blink.executor.compute_thread: the in-process backend on the CPU, whose
passes all run there) there is no batcher thread: the compute thread collects and scores the batches itself, one
turn per batch, posted when a request arrives and none is pending. A request's way from the event loop to its pass
and back is then two hand-offs between threads instead of four, and chat steps take their turns between batches. A
window then holds the compute thread while it collects.

A request of several decisions (a rerank's documents, each its own state: `submit_many`) is queued as one job that
carries them all: it counts as one request of a batch, its decisions are scored in the same call (never one call
each while a window of 0 serves one request per call), and each decision gets its own result.

A request whose client left is cancelled (its future): it is dropped from the queue without being computed, and
its queue slot is free at once; one already in a pass finishes, and its result is dropped.

Bulk work (a caller marked `bulk`: the Batch API's rows) is a lane of its own: a call holds bulk rows or
interactive requests, never both; an interactive request waiting is always taken before any bulk row (so it waits
at most for the bulk call already running, never behind queued bulk rows); and a bulk call takes the bulk rows
queued, whatever the window, as many as fit in `bulk_call_s` seconds at the speed bulk calls have run at
(blink.decide.bulk_pace).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from blink.decide.bulk_pace import BulkPace, plan_tokens
from blink.errors import EngineFailure, Overloaded
from blink.web.callers import key_of, quota_of
from blink.web.fair_queue import FairQueue

log = logging.getLogger("blink")


@dataclass
class Job:
    plan: Any
    # who asked (blink.web.callers.Caller): batches are filled fairly between callers (its key), and a batch holds the
    # jobs of one quota (the Space: the caller's ZeroGPU identity), which the backend charges
    caller: Any = None
    future: Future = field(default_factory=Future)
    # more plans scored in the same call on this request's behalf (its content-free prompts, blink.decide.prior); their
    # outcomes are in `extra_scored` by the time `future` is done
    extra: list = field(default_factory=list)
    extra_scored: list = field(default_factory=list)
    queued_at: float = field(default_factory=time.perf_counter)
    started_at: float = 0.0
    # the other decisions of the same request (`submit_many`): queued and scored with this one, each its own future
    more: list = field(default_factory=list)

    def members(self) -> list[Job]:
        return [self, *self.more]

    @property
    def bulk(self) -> bool:
        """Bulk work (the Batch API's rows): its own calls, after every interactive request waiting."""
        return bool(getattr(self.caller, "bulk", False))

    @cached_property
    def tokens(self) -> int:
        """Its prompt tokens (a bulk call's size): counted once, read when filling the call and when timing it."""
        return sum(plan_tokens(plan) for job in self.members() for plan in (job.plan, *job.extra))

    def gone(self) -> bool:
        """Every decision of the request was cancelled (its client left): nothing of it is worth computing."""
        return all(job.future.cancelled() for job in self.members())


class OnItsWay:
    """A request counted on its way to the queue: taken in by an entry point, its body read, not queued yet (being
    checked, waiting for a place, planned). A window stays open while any is counted, so a burst is batched
    together even while its last requests are still on their way. The count ends once (`release`, from any
    thread): as the request is queued, or as its exchange ends without reaching the queue (refused, failed, its
    client gone)."""

    __slots__ = ("_batcher", "_counted")

    def __init__(self, batcher: Batcher):
        self._batcher, self._counted = batcher, True
        batcher.expect(+1)

    def release(self) -> None:
        with self._batcher._incoming_lock:
            if not self._counted:
                return
            self._counted = False
            self._batcher.incoming -= 1


class Batcher:
    def __init__(
        self,
        score: Callable[[list, Any], list],
        window_s: float = 0.0,
        max_batch: int = 16,
        max_queued: int = 64,
        concurrency: int = 1,
        on=None,
        bulk_call_s: float = 1.0,
    ):
        self.score = score
        self.bulk = BulkPace(bulk_call_s)
        self.window_s = window_s if concurrency == 1 else 0.0
        self.max_batch = max_batch if self.window_s > 0 else 1
        self.concurrency = max(1, concurrency)
        self.running = 0  # requests handed to the workers and not yet answered
        self._slots = threading.Semaphore(self.concurrency)
        self.workers = (
            ThreadPoolExecutor(self.concurrency, thread_name_prefix="blink-dispatch") if self.concurrency > 1 else None
        )
        self.dropped = 0  # requests whose client left before their pass: never computed
        self._counts = threading.Lock()
        self.max_queued = max_queued
        self.queue: queue.Queue[Job] = queue.Queue(maxsize=max_queued)
        # taken from the queue, waiting for a batch in fair order between callers; the collecting thread's own
        self.held = FairQueue()
        # requests taken in but not queued yet (OnItsWay): the only ones worth waiting for
        self.incoming = 0
        self._incoming_lock = threading.Lock()
        self.batches = 0
        self.requests = 0
        self.on = on if self.concurrency == 1 else None
        self._turn_posted = False  # with `on`: a turn is waiting there and will see every request queued by now
        self._turns = threading.Lock()
        self.thread = None
        if self.on is None:
            self.thread = threading.Thread(target=self._loop, name="blink-batcher", daemon=True)
            self.thread.start()

    def on_its_way(self) -> OnItsWay:
        """Count a request on its way to the queue from now until it is queued or let go."""
        return OnItsWay(self)

    def submit(self, plan, caller=None, extra: list = (), on_its_way: OnItsWay | None = None) -> Job:
        """`on_its_way`: the request's count, which ends as it is queued (or refused here), so that a window never
        waits for a request already in the queue."""
        return self.submit_many([(plan, extra)], caller, on_its_way)[0]

    def submit_many(self, items: list, caller=None, on_its_way: OnItsWay | None = None) -> list[Job]:
        """One request's decisions, `(plan, extra)` each, queued as one job and scored in one call; a job per
        decision back, in order, each with its own future. The request's count on its way ends as it is queued."""
        jobs = [Job(plan, caller, extra=list(extra)) for plan, extra in items]
        job = jobs[0]
        job.more = jobs[1:]
        try:
            self._enqueue(job)
        finally:
            if on_its_way is not None:
                on_its_way.release()
        if self.on is not None:
            self._post_turn()
        return jobs

    def _enqueue(self, job: Job) -> None:
        if self.queue.qsize() + len(self.held) >= self.max_queued:
            self._purge()  # slots held by requests whose clients left are free
        if self.held and self.queue.qsize() + len(self.held) >= self.max_queued:
            raise Overloaded()
        try:
            self.queue.put_nowait(job)
        except queue.Full:
            raise Overloaded() from None

    def _post_turn(self) -> None:
        with self._turns:
            if self._turn_posted:
                return
            self._turn_posted = True
        self.on.post(self._turn)

    def _purge(self) -> None:
        """Drop the queued requests whose client left (their future is cancelled)."""
        with self.queue.mutex:
            live = deque(job for job in self.queue.queue if not job.gone())
            gone = len(self.queue.queue) - len(live)
            if gone:
                self.queue.queue = live
                self.queue.unfinished_tasks = max(0, self.queue.unfinished_tasks - gone)
                self.queue.not_full.notify_all()
        # `held` belongs to the batcher thread; the ones there are skipped when they are taken
        self._drop(gone)

    def expect(self, delta: int) -> None:
        """Requests start (+1) or end (-1) their way to the queue: the window waits only while some are on it."""
        with self._incoming_lock:
            self.incoming += delta

    def alive(self) -> bool:
        return self.on.alive() if self.thread is None else self.thread.is_alive()

    def _drop(self, n: int) -> None:
        with self._counts:
            self.dropped += n

    def _hold(self, job: Job) -> None:
        if job.gone():
            self._drop(1)
        else:
            self.held.push(key_of(job.caller), len(job.members()), job)

    def _take_queued(self, block: bool = False, timeout: float | None = None) -> bool:
        """Everything queued moves to `held` (the first one waited for when `block`); False when none came."""
        try:
            self._hold(self.queue.get(block=block, timeout=timeout))
        except queue.Empty:
            return False
        while True:
            try:
                self._hold(self.queue.get_nowait())
            except queue.Empty:
                return True

    def _next(self, quota=None, any_quota: bool = False, bulk: bool = False) -> Job | None:
        """The next live request of the lane (`bulk` or interactive) in fair order (charged to `quota` unless
        `any_quota`), taken from `held`."""

        def eligible(job: Job) -> bool:
            return job.bulk == bulk and (any_quota or quota_of(job.caller) == quota)

        while (entry := self.held.head(eligible)) is not None:
            job = self.held.pop(entry)
            if not job.gone():
                return job
            self._drop(1)
        return None

    def _collect(self, wait: bool = True) -> list[Job]:
        self._take_queued()
        if not self.held and not (wait and self._take_queued(block=True)):
            return []
        first = self._next(any_quota=True)  # an interactive request first, whoever's bulk rows wait
        if first is None:
            bulk = self._next(any_quota=True, bulk=True)
            return [] if bulk is None else self._fill_bulk(bulk)
        jobs, quota = [first], quota_of(first.caller)
        # The window closes early when nothing more is on its way: a lone request doesn't wait for company
        # that isn't coming, and a burst is decided as soon as its last request is prepared.
        deadline = time.perf_counter() + self.window_s
        while len(jobs) < self.max_batch:
            job = self._next(quota)
            if job is not None:
                jobs.append(job)
                continue
            remaining = deadline - time.perf_counter()
            if not (self.queue.qsize() or (remaining > 0 and self.incoming > 0)):
                break
            self._take_queued(block=True, timeout=max(0.0, min(remaining, 0.001)))
        return jobs

    def _fill_bulk(self, first: Job) -> list[Job]:
        """A bulk call: `first` and the bulk rows of its quota already queued, as many as the pace's token budget
        holds (never waiting for more: what arrives meanwhile goes in the next call). With workers (vLLM
        replicas) each row goes out on its own, as every request does there."""
        jobs, quota = [first], quota_of(first.caller)
        tokens, budget = first.tokens, self.bulk.budget()
        while self.workers is None:
            entry = self.held.head(lambda job: job.bulk and quota_of(job.caller) == quota)
            if entry is None or tokens + entry.item.tokens > budget:
                break
            job = self.held.pop(entry)
            if job.gone():
                self._drop(1)
                continue
            jobs.append(job)
            tokens += job.tokens
        return jobs

    def _turn(self) -> None:
        """One batch on the compute thread, then the next turn posted behind whatever else waits there (a chat
        step) if requests are left. A request queued after this turn began posts its own."""
        with self._turns:
            self._turn_posted = False
        jobs: list[Job] = []
        try:
            jobs = self._collect(wait=False)
            if jobs:
                self._run(jobs)
            if self.held or self.queue.qsize():
                self._post_turn()
        except BaseException as exc:  # noqa: BLE001 - nobody waits for a turn: its requests learn why, it is logged
            log.exception("the decision batcher's turn failed")
            for job in (member for request in jobs for member in request.members()):
                if not job.future.done():
                    job.future.set_exception(exc)

    def _loop(self) -> None:
        while True:
            jobs = self._collect()
            if self.workers is None:
                self._run(jobs)
                continue
            self._slots.acquire()  # a worker is free: the next request goes out as soon as one is
            with self._counts:
                self.running += len(jobs)
            self.workers.submit(self._dispatched, jobs)

    def _dispatched(self, jobs: list[Job]) -> None:
        try:
            self._run(jobs)
        finally:
            with self._counts:
                self.running -= len(jobs)
            self._slots.release()

    def _run(self, jobs: list[Job]) -> None:
        # from here on a request is running: its client leaving no longer cancels it (its result is dropped)
        members = [member for job in jobs for member in job.members()]
        live = [job for job in members if job.future.set_running_or_notify_cancel()]
        gone = sum(job.gone() for job in jobs)  # whole requests whose client left: none of theirs is computed
        self._drop(gone)
        if not live:
            return
        started = time.perf_counter()
        for job in live:
            job.started_at = started
        plans = [plan for job in live for plan in (job.plan, *job.extra)]  # a request's own, then its prior's
        try:
            out = list(self.score(plans, live[0].caller))  # a Caller: the backend charges its quota
            if len(out) != len(plans):
                raise EngineFailure(f"the backend scored {len(out)} plans of {len(plans)}", kind="backend_failed")
        except BaseException as exc:  # noqa: BLE001 - every waiting request learns why; the thread lives on
            for job in live:
                job.future.set_exception(exc)
            return
        if jobs[0].bulk:
            self.bulk.record(len(jobs), sum(job.tokens for job in jobs), time.perf_counter() - started)
        self.batches += 1
        self.requests += len(jobs) - gone
        at = 0
        for job in live:
            job.extra_scored = out[at + 1 : at + 1 + len(job.extra)]
            job.future.set_result(out[at])
            at += 1 + len(job.extra)

    def stats(self) -> dict:
        return {
            "window_ms": self.window_s * 1000,
            "max_requests": self.max_batch,
            "max_queued": self.max_queued,
            "worker_alive": self.alive(),
            "queued": self.queue.qsize() + len(self.held),
            "on_its_way": self.incoming,  # taken in, not queued yet: a window waits while any is
            "running": self.running,
            "concurrency": self.concurrency,
            "dropped_client_gone": self.dropped,
            "batches": self.batches,
            "requests": self.requests,
            "bulk": self.bulk.stats(),
        }
