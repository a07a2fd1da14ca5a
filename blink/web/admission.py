"""Admission: one gate in front of everything that spends model time, passed before any work is done.

Every entry point (System One, Decisions, chat, Responses, Completions, the Gradio UI's events, MCP) takes the
same steps once its body is read (blink.web.bodies: bytes in flight bounded, no place held while a body arrives):

    async with admission.admit("decide", KEYED, service.check, body) as (checked, ticket):
        # check ran in a worker thread before any place was taken: what will be refused is refused at once,
        # whatever the load; then a place, or 529 + Retry-After in microseconds
        async with ticket.preparing():                          # at most `preparing` requests tokenize at once
            prepared = await run_in_threadpool(planner.plan, checked)
        ...                                                     # queue, model, answer: the place is held

A request that asks for several decisions at once (a rerank of 32 documents, a list of prompts) holds one place per
decision (`units`), so it cannot slip past limits meant for that many decisions; one asking for more places than
the gate has is refused at once (422 naming the limit), never left waiting for places that cannot all free.

A refusal costs no tokenizing and no queue slot, so an overloaded server keeps its time for the requests it
admitted. Each kind of work has its own budget (`Policy`): how many requests hold a place at once,
how long one may wait for a place before it is refused (chat waits for a slot; a decision waits a few seconds,
so a burst is served back to back instead of sleeping through client-side retries), and how many places
anonymous callers (the UI) may never take, so keyed API traffic is never starved by anonymous traffic; when a
place frees, waiting keyed callers are served before anonymous ones. `Retry-After` is the expected wait: the
places ahead of the caller times the mean time a place is held.

The gate is thread-safe: the UI's synchronous event handlers enter it with `enter_sync` from worker threads,
the routes with `enter` from the event loop, and they share the same places.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any

from starlette.concurrency import run_in_threadpool

from blink.errors import InvalidRequest, Overloaded

KEYED = "keyed"  # a caller who presented the API key, or any API caller when no key is set
ANONYMOUS = "anonymous"  # the Gradio UI's callers when a key is set: they may never take the reserved places
CLASSES = (KEYED, ANONYMOUS)


@dataclass(frozen=True)
class Policy:
    capacity: int  # requests holding a place at once (preparing, queued or running)
    wait_s: float = 0.0  # longest wait for a place before 529 (0: refuse at once)
    reserved: int = 0  # places anonymous callers never take
    preparing: int = 2  # requests parsing/tokenizing at once (the CPU work before the queue)
    anonymous_wait_s: float | None = None  # anonymous callers' longest wait (default: wait_s)

    def __post_init__(self):
        if self.capacity < 1 or not 0 <= self.reserved < self.capacity or self.preparing < 1 or self.wait_s < 0:
            raise ValueError(f"invalid admission policy {self}")


class _Waiter:
    """One caller waiting for its places (`units` of them): woken from whichever thread frees them."""

    __slots__ = ("caller_class", "units", "granted", "_wake")

    def __init__(self, caller_class: str, units: int, wake):
        self.caller_class, self.units, self.granted, self._wake = caller_class, units, False, wake

    def wake(self) -> None:
        self.granted = True
        self._wake()


class Gate:
    """The places of one kind of work."""

    def __init__(self, kind: str, policy: Policy, clock=time.monotonic):
        self.kind, self.policy, self.clock = kind, policy, clock
        self.lock = threading.Lock()
        self.held = {c: 0 for c in CLASSES}
        self.waiting: dict[str, deque[_Waiter]] = {c: deque() for c in CLASSES}
        self.admitted = self.refused = self.waited = 0
        self.mean_hold_s = 0.5  # running mean of how long a place is held (seeds Retry-After)
        self.measured = False  # a place has been given back: the mean is a measurement, not the seed
        self.preparing = Bound(policy.preparing)

    # places -------------------------------------------------------------------------------------------------
    def most(self, caller_class: str = KEYED) -> int:
        """The most places one request of this class can ever hold."""
        return self.policy.capacity - (self.policy.reserved if caller_class == ANONYMOUS else 0)

    def check_units(self, units: int, caller_class: str = KEYED) -> None:
        """Refuses at once a request that asks for more places than it could ever hold: waiting would never end."""
        if units > self.most(caller_class):
            raise InvalidRequest(
                f"this request asks for {units} {self.kind} units of work at once; this server takes at most "
                f"{self.most(caller_class)} in one request: send fewer, or split it",
                kind="too_much_work",
            )

    def _fits(self, caller_class: str, units: int = 1) -> bool:
        total = self.held[KEYED] + self.held[ANONYMOUS] + units
        return total <= self.most(caller_class)

    def _take_now(self, caller_class: str, units: int) -> bool:
        # a newcomer never jumps the queue of its own class, nor a waiting keyed caller
        if self.waiting[KEYED] or (caller_class == ANONYMOUS and self.waiting[ANONYMOUS]):
            return False
        if self._fits(caller_class, units):
            self.held[caller_class] += units
            self.admitted += 1
            return True
        return False

    def _wait_limit(self, caller_class: str) -> float:
        if caller_class == ANONYMOUS and self.policy.anonymous_wait_s is not None:
            return self.policy.anonymous_wait_s
        return self.policy.wait_s

    def _expected_wait(self, caller_class: str = KEYED, units: int = 1) -> float:
        """Seconds until a place is expected to free for this caller: those ahead of it, served `capacity` at
        a time, each holding its place for the mean time seen so far."""
        classes = CLASSES if caller_class == ANONYMOUS else (KEYED,)
        ahead = sum(w.units for c in classes for w in self.waiting[c])
        return self.mean_hold_s * (ahead + units) / self.policy.capacity

    def retry_after(self, caller_class: str = KEYED, units: int = 1) -> int:
        return max(1, math.ceil(self._expected_wait(caller_class, units)))

    def _refuse(self, caller_class: str, units: int = 1) -> Overloaded:
        self.refused += 1
        seconds = self.retry_after(caller_class, units)
        what = "chat slot" if self.kind == "chat" else "place"
        return Overloaded(
            f"blink is busy: every {what} for {self.kind} requests is taken. Retry after {seconds} s.",
            retry_after=seconds,
            kind="overloaded",
        )

    def _enqueue(self, caller_class: str, units: int, wake) -> _Waiter | None:
        """Under the lock: the waiter, or None when the caller took its places at once; raises when it may not
        wait."""
        self.check_units(units, caller_class)
        if self._take_now(caller_class, units):
            return None
        limit = self._wait_limit(caller_class)
        if limit <= 0 or (self.measured and self._expected_wait(caller_class, units) > limit):
            raise self._refuse(caller_class, units)  # a wait that would end in a refusal anyway is refused now
        waiter = _Waiter(caller_class, units, wake)
        self.waiting[caller_class].append(waiter)
        self.waited += 1
        return waiter

    def _abandon(self, waiter: _Waiter) -> None:
        """Under the lock: a waiter that timed out or was cancelled; a place granted meanwhile goes back."""
        if waiter.granted:
            self._release(waiter.caller_class, waiter.units)
        else:
            self.waiting[waiter.caller_class].remove(waiter)
            self._release(waiter.caller_class, 0)  # those behind a big waiter may fit now that it is gone

    def _release(self, caller_class: str, units: int) -> None:
        self.held[caller_class] -= units
        for waiting_class in CLASSES:  # keyed first; in order: a big request is not overtaken by small ones
            queue = self.waiting[waiting_class]
            while queue and self._fits(waiting_class, queue[0].units):
                waiter = queue.popleft()
                self.held[waiting_class] += waiter.units
                self.admitted += 1
                waiter.wake()

    def _leave(self, caller_class: str, units: int, since: float) -> None:
        with self.lock:
            self.mean_hold_s += (self.clock() - since - self.mean_hold_s) * 0.2
            self.measured = True
            self._release(caller_class, units)

    # entering -----------------------------------------------------------------------------------------------
    @asynccontextmanager
    async def enter(self, caller_class: str = KEYED, units: int = 1):
        """`units` places held together (a request of several decisions), taken and given back at once."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()

        def wake():
            loop.call_soon_threadsafe(lambda: future.done() or future.set_result(True))

        with self.lock:
            waiter = self._enqueue(caller_class, units, wake)
        if waiter is not None:
            try:
                await asyncio.wait_for(asyncio.shield(future), self._wait_limit(caller_class))
            except (TimeoutError, asyncio.CancelledError) as exc:
                with self.lock:
                    granted = waiter.granted
                    if not granted or isinstance(exc, asyncio.CancelledError):
                        self._abandon(waiter)
                        if isinstance(exc, asyncio.CancelledError):
                            raise
                        raise self._refuse(caller_class, units) from None
        since = self.clock()
        try:
            yield Ticket(self)
        finally:
            self._leave(caller_class, units, since)

    @contextmanager
    def enter_sync(self, caller_class: str = KEYED, units: int = 1):
        """The same gate for code running in a worker thread (the Gradio UI's synchronous handlers)."""
        event = threading.Event()
        with self.lock:
            waiter = self._enqueue(caller_class, units, event.set)
        if waiter is not None and not event.wait(self._wait_limit(caller_class)):
            with self.lock:
                if not waiter.granted:
                    self._abandon(waiter)
                    raise self._refuse(caller_class, units)
        since = self.clock()
        try:
            yield Ticket(self)
        finally:
            self._leave(caller_class, units, since)

    def state(self) -> dict:
        with self.lock:
            return {
                "capacity": self.policy.capacity,
                "reserved_for_keyed": self.policy.reserved,
                "wait_s": self.policy.wait_s,
                "held": dict(self.held),
                "waiting": {c: len(q) for c, q in self.waiting.items()},
                "admitted": self.admitted,
                "refused": self.refused,
                "waited": self.waited,
                "mean_hold_s": round(self.mean_hold_s, 3),
                "retry_after_s": self.retry_after(),
                "preparing": self.preparing.held,
            }


class Bound:
    """At most `n` holders at once, first come first served, for event-loop tasks and threads alike
    (an asyncio.Semaphore belongs to one loop; the Space's UI handlers run in threads)."""

    def __init__(self, n: int):
        self.n, self.held = n, 0
        self.lock = threading.Lock()
        self.waiting: deque = deque()

    def _try(self, wake) -> bool:
        with self.lock:
            if self.held < self.n and not self.waiting:
                self.held += 1
                return True
            self.waiting.append(wake)
            return False

    def release(self) -> None:
        with self.lock:
            if self.waiting:
                self.waiting.popleft()()  # the place passes straight to the next in line
            else:
                self.held -= 1

    @asynccontextmanager
    async def hold_async(self):
        loop = asyncio.get_running_loop()
        future = loop.create_future()

        def wake():
            loop.call_soon_threadsafe(lambda: future.done() or future.set_result(True))

        if not self._try(wake):
            try:
                await asyncio.shield(future)
            except asyncio.CancelledError:
                with self.lock:
                    if wake in self.waiting:
                        self.waiting.remove(wake)
                        raise
                self.release()  # handed to us as we left: pass it on
                raise
        try:
            yield
        finally:
            self.release()

    @contextmanager
    def hold_sync(self):
        event = threading.Event()
        if not self._try(event.set):
            event.wait()
        try:
            yield
        finally:
            self.release()


class Ticket:
    """A held place. `preparing()` bounds how many admitted requests do their CPU preparation at once."""

    def __init__(self, gate: Gate):
        self.gate = gate

    @asynccontextmanager
    async def preparing(self):
        async with self.gate.preparing.hold_async():
            yield

    @contextmanager
    def preparing_sync(self):
        with self.gate.preparing.hold_sync():
            yield


# how many places a request holds: a number, or a function of what its check returned
Units = int | Callable[[Any], int]


def units_of(units, checked) -> int:
    """How many places a checked request holds: `units` as it is, or `units(checked)`; at least one."""
    n = units(checked) if callable(units) else units
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"a request holds a whole number of places, at least 1, not {n!r}")
    return n


class Admission:
    """Every kind of model work and its gate: `decide` (System One, Decisions, the UI's decide, MCP's decide)
    and `chat` (the API's chat and the UI's chat share its slots)."""

    def __init__(self, policies: dict[str, Policy]):
        self.gates = {kind: Gate(kind, policy) for kind, policy in policies.items()}

    @classmethod
    def standard(
        cls,
        *,
        max_queued: int = 64,
        max_batch: int = 16,
        max_chats: int = 4,
        chat_wait_s: float = 30.0,
        reserved_decide: int | None = None,
        reserved_chat: int | None = None,
        preparing: int = 2,
        decide_wait_s: float = 0.0,
    ) -> Admission:
        """The server's gates from its settings: a decision holds a place from its first byte to its answer
        (the batcher's queue plus the batch being run), a chat holds a generation slot."""
        capacity = max_queued + max_batch
        decide = Policy(
            capacity,
            wait_s=decide_wait_s,
            preparing=preparing,
            reserved=capacity // 4 if reserved_decide is None else reserved_decide,
        )
        chat = Policy(
            max_chats,
            wait_s=chat_wait_s,
            preparing=preparing,
            reserved=(max_chats // 4 if reserved_chat is None else reserved_chat),
        )
        return cls({"decide": decide, "chat": chat})

    def gate(self, kind: str) -> Gate:
        try:
            return self.gates[kind]
        except KeyError:
            raise ValueError(f"no admission policy for {kind!r}; known: {sorted(self.gates)}") from None

    def enter(self, kind: str, caller_class: str = KEYED, units: int = 1):
        return self.gate(kind).enter(caller_class, units)

    @asynccontextmanager
    async def admit(self, kind: str, caller_class: str = KEYED, check: Callable | None = None, *args, units: Units = 1):
        """The pipeline's check and admit steps, in that order, for every entry point: `check(*args)` (in a worker
        thread) refuses what it will, then `units` places are taken (a number, or a function of what `check`
        returned: the decisions the request asks for). Yields (what `check` returned, the ticket)."""
        checked = await run_in_threadpool(check, *args) if check is not None else None
        async with self.gate(kind).enter(caller_class, units_of(units, checked)) as ticket:
            yield checked, ticket

    @contextmanager
    def admit_sync(self, kind: str, caller_class: str = KEYED, check: Callable | None = None, *args, units: Units = 1):
        """`admit` for code running in a worker thread (the Gradio UI's synchronous handlers)."""
        checked = check(*args) if check is not None else None
        with self.gate(kind).enter_sync(caller_class, units_of(units, checked)) as ticket:
            yield checked, ticket

    def enter_sync(self, kind: str, caller_class: str = KEYED, units: int = 1):
        return self.gate(kind).enter_sync(caller_class, units)

    def state(self) -> dict:
        """For /healthz: each gate's places, waiters and refusals."""
        return {kind: gate.state() for kind, gate in self.gates.items()}
