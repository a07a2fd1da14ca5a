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

Places are shared fairly between the callers waiting (who a caller is: blink.web.callers, one identity whatever the
entry point). Within a class, waiters are served by start-time fair queuing over their units of work
(blink.web.fair_queue): a caller keeping a hundred decisions waiting has them tagged one after another, so a caller
arriving with one decision is served when the next place frees, not behind that backlog; with nobody else waiting,
the greedy caller takes every place that frees but the last few of its class: `kept_for_others` (by default one
batch's worth) wait for whoever comes next, so a caller arriving finds a place free and is in the next batch instead
of waiting for one to end, while the greedy caller still holds a batch running and the next one queued. A caller
may hold and wait for at most `per_caller` places at once (the `max_places_per_caller` knob); past it, it is
refused at once with the wire's overload status and Retry-After.
A waiter that would wait past its limit is refused at once, its expected wait counted from the units served before
it in fair order (a polite caller's is short whatever a greedy one has queued). Fair shares hold per process.

The gate is thread-safe: the UI's synchronous event handlers enter it with `enter_sync` from worker threads,
the routes with `enter` from the event loop, and they share the same places.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any

from starlette.concurrency import run_in_threadpool

from blink.errors import InvalidRequest, Overloaded
from blink.web.bound import Bound
from blink.web.callers import NOBODY, key_of
from blink.web.fair_queue import FairQueue

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
    per_caller: int = 0  # places one caller holds and waits for at once, past it 529 (0: no cap of its own)
    kept_for_others: int = 0  # a class's last places, which a caller already holding some waits for instead

    def __post_init__(self):
        if self.capacity < 1 or not 0 <= self.reserved < self.capacity or self.preparing < 1 or self.wait_s < 0:
            raise ValueError(f"invalid admission policy {self}")
        if self.per_caller < 0 or not 0 <= self.kept_for_others < self.capacity:
            raise ValueError(f"invalid admission policy {self}")

    @property
    def caller_cap(self) -> int:
        return min(self.per_caller or self.capacity, self.capacity)


class _Waiter:
    """One caller waiting for its places (`units` of them): woken from whichever thread frees them."""

    __slots__ = ("caller_class", "who", "units", "granted", "entry", "_wake")

    def __init__(self, caller_class: str, who: str, units: int, wake):
        self.caller_class, self.who, self.units, self.granted, self._wake = caller_class, who, units, False, wake
        self.entry = None

    def wake(self) -> None:
        self.granted = True
        self._wake()


class Gate:
    """The places of one kind of work, shared fairly between the callers waiting for them."""

    def __init__(self, kind: str, policy: Policy, clock=time.monotonic):
        self.kind, self.policy, self.clock = kind, policy, clock
        self.lock = threading.Lock()
        self.held = {c: 0 for c in CLASSES}
        self.held_by: dict[str, int] = {}  # places held per caller (only callers holding some)
        self.waiting: dict[str, FairQueue] = {c: FairQueue() for c in CLASSES}
        self.admitted = self.refused = self.waited = self.capped = 0
        self.mean_hold_s = 0.5  # running mean of how long a place is held (seeds Retry-After)
        self.measured = False  # a place has been given back: the mean is a measurement, not the seed
        self.preparing = Bound(policy.preparing)

    # places -------------------------------------------------------------------------------------------------
    def most(self, caller_class: str = KEYED) -> int:
        """The most places one request of this class can ever hold."""
        most = self.policy.capacity - (self.policy.reserved if caller_class == ANONYMOUS else 0)
        return min(most, self.policy.caller_cap)

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
        return total <= self.policy.capacity - (self.policy.reserved if caller_class == ANONYMOUS else 0)

    def _leaves_room(self, waiter: _Waiter) -> bool:
        """Whether granting leaves the class's last `kept_for_others` places to the other callers. A caller that
        holds none is never held back (a request of many units is served whole), so a lone caller still runs full
        batches; one that holds some waits for them, so a caller arriving finds a free place and rides the next
        batch instead of waiting for a batch to end."""
        held = self.held_by.get(waiter.who, 0)
        if not held or not self.policy.kept_for_others:
            return True
        room = self.policy.capacity - (self.policy.reserved if waiter.caller_class == ANONYMOUS else 0)
        return held + waiter.units <= room - self.policy.kept_for_others

    def _grant(self, waiter: _Waiter) -> None:
        self.held[waiter.caller_class] += waiter.units
        self.held_by[waiter.who] = self.held_by.get(waiter.who, 0) + waiter.units
        self.admitted += 1
        waiter.wake()

    def _dispatch(self) -> None:
        """Places to waiters: keyed callers first, then anonymous ones; within a class in fair order (the smallest
        start tag, blink.web.fair_queue) among the callers the places kept for others let in, stopping at a
        request that does not fit, so a big request is never overtaken for ever by small ones."""
        for caller_class in CLASSES:
            queue = self.waiting[caller_class]
            while (entry := queue.head(self._leaves_room)) is not None and self._fits(caller_class, entry.units):
                self._grant(queue.pop(entry))

    def _wait_limit(self, caller_class: str) -> float:
        if caller_class == ANONYMOUS and self.policy.anonymous_wait_s is not None:
            return self.policy.anonymous_wait_s
        return self.policy.wait_s

    def _ahead(self, caller_class: str, waiter: _Waiter | None) -> int:
        """The units served before a waiter of this class (itself included), or, with none, all those waiting."""
        keyed = self.waiting[KEYED]
        if waiter is None:
            return keyed.units + (self.waiting[ANONYMOUS].units if caller_class == ANONYMOUS else 0)
        if caller_class == KEYED:
            return keyed.ahead(waiter.entry)
        return keyed.units + self.waiting[ANONYMOUS].ahead(waiter.entry)

    def _expected_wait(self, caller_class: str = KEYED, units: int = 1, waiter: _Waiter | None = None) -> float:
        """Seconds until a place is expected to free for this caller: those served before it, `capacity` at a
        time, each holding its place for the mean time seen so far."""
        ahead = self._ahead(caller_class, waiter) + (0 if waiter is not None else units)
        return self.mean_hold_s * ahead / self.policy.capacity

    def retry_after(self, caller_class: str = KEYED, units: int = 1) -> int:
        return max(1, math.ceil(self._expected_wait(caller_class, units)))

    def _refuse(self, caller_class: str, units: int = 1, seconds: int | None = None) -> Overloaded:
        self.refused += 1
        seconds = seconds or self.retry_after(caller_class, units)
        what = "chat slot" if self.kind == "chat" else "place"
        return Overloaded(
            f"blink is busy: every {what} for {self.kind} requests is taken. Retry after {seconds} s.",
            retry_after=seconds,
            kind="overloaded",
        )

    def _refuse_capped(self, who: str) -> Overloaded:
        """A caller already holding (or waiting for) its share: the wire's overload answer, after about the time
        one of its own places takes to free."""
        self.refused += 1
        self.capped += 1
        seconds = max(1, math.ceil(self.mean_hold_s))
        return Overloaded(
            f"blink is busy: this caller already holds its share of {self.policy.caller_cap} {self.kind} places. "
            f"Retry after {seconds} s.",
            retry_after=seconds,
            kind="overloaded",
        )

    def _mine(self, who: str) -> int:
        """The places a caller holds and waits for."""
        return self.held_by.get(who, 0) + self.waiting[KEYED].waiting(who) + self.waiting[ANONYMOUS].waiting(who)

    def _enqueue(self, caller_class: str, who: str, units: int, wake) -> _Waiter | None:
        """Under the lock: the waiter, or None when the caller took its places at once; raises when it may not
        wait."""
        self.check_units(units, caller_class)
        if self.policy.per_caller and self._mine(who) + units > self.policy.per_caller:
            raise self._refuse_capped(who)
        waiter = _Waiter(caller_class, who, units, wake)
        waiter.entry = self.waiting[caller_class].push(who, units, waiter)
        self._dispatch()  # served at once when nobody is ahead of it in fair order and its places are free
        if waiter.granted:
            return None
        limit, expected = self._wait_limit(caller_class), self._expected_wait(caller_class, units, waiter)
        if limit <= 0 or (self.measured and expected > limit):
            self.waiting[caller_class].remove(waiter.entry)  # a wait that would end in a refusal is refused now
            self._dispatch()  # it may have been the head that blocked smaller requests behind it
            raise self._refuse(caller_class, units, max(1, math.ceil(expected)))
        self.waited += 1
        return waiter

    def _abandon(self, waiter: _Waiter) -> None:
        """Under the lock: a waiter that timed out or was cancelled; a place granted meanwhile goes back."""
        if waiter.granted:
            self._release(waiter.caller_class, waiter.who, waiter.units)
        else:
            self.waiting[waiter.caller_class].remove(waiter.entry)
            self._dispatch()  # those behind a big waiter may fit now that it is gone

    def _release(self, caller_class: str, who: str, units: int) -> None:
        self.held[caller_class] -= units
        left = self.held_by.get(who, 0) - units
        if left > 0:
            self.held_by[who] = left
        else:
            self.held_by.pop(who, None)
        self._dispatch()

    def _leave(self, caller_class: str, who: str, units: int, since: float) -> None:
        with self.lock:
            self.mean_hold_s += (self.clock() - since - self.mean_hold_s) * 0.2
            self.measured = True
            self._release(caller_class, who, units)

    # entering -----------------------------------------------------------------------------------------------
    @asynccontextmanager
    async def enter(self, caller_class: str = KEYED, units: int = 1, who: str = NOBODY.key):
        """`units` places held together (a request of several decisions), taken and given back at once, for the
        caller `who` (its fair-share key, blink.web.callers)."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()

        def wake():
            loop.call_soon_threadsafe(lambda: future.done() or future.set_result(True))

        with self.lock:
            waiter = self._enqueue(caller_class, who, units, wake)
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
            self._leave(caller_class, who, units, since)

    @contextmanager
    def enter_sync(self, caller_class: str = KEYED, units: int = 1, who: str = NOBODY.key):
        """The same gate for code running in a worker thread (the Gradio UI's synchronous handlers)."""
        event = threading.Event()
        with self.lock:
            waiter = self._enqueue(caller_class, who, units, event.set)
        if waiter is not None and not event.wait(self._wait_limit(caller_class)):
            with self.lock:
                if not waiter.granted:
                    self._abandon(waiter)
                    raise self._refuse(caller_class, units)
        since = self.clock()
        try:
            yield Ticket(self)
        finally:
            self._leave(caller_class, who, units, since)

    def state(self) -> dict:
        with self.lock:
            return {
                "capacity": self.policy.capacity,
                "reserved_for_keyed": self.policy.reserved,
                "per_caller": self.policy.caller_cap,
                "kept_for_others": self.policy.kept_for_others,
                "wait_s": self.policy.wait_s,
                "held": dict(self.held),
                "callers_holding": len(self.held_by),
                "waiting": {c: len(q) for c, q in self.waiting.items()},
                "callers_waiting": {c: len(q.queues) for c, q in self.waiting.items()},
                "admitted": self.admitted,
                "refused": self.refused,
                "refused_at_caller_cap": self.capped,
                "waited": self.waited,
                "mean_hold_s": round(self.mean_hold_s, 3),
                "retry_after_s": self.retry_after(),
                "preparing": self.preparing.held,
            }


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
        per_caller_decide: int = 0,
        per_caller_chat: int = 0,
        kept_for_others: int | None = None,
    ) -> Admission:
        """The server's gates from its settings: a decision holds a place from its first byte to its answer
        (the batcher's queue plus the batch being run), a chat holds a generation slot. By default one batch's
        places (at most the queue's) are kept for callers other than one already holding some: it still holds
        at least a batch running and one queued, so a lone caller loses no throughput."""
        capacity = max_queued + max_batch
        if kept_for_others is None:
            kept_for_others = min(max_batch, max_queued)
        decide = Policy(
            capacity,
            wait_s=decide_wait_s,
            preparing=preparing,
            reserved=capacity // 4 if reserved_decide is None else reserved_decide,
            per_caller=per_caller_decide,
            kept_for_others=kept_for_others,
        )
        chat = Policy(
            max_chats,
            wait_s=chat_wait_s,
            preparing=preparing,
            reserved=(max_chats // 4 if reserved_chat is None else reserved_chat),
            per_caller=per_caller_chat,
        )
        return cls({"decide": decide, "chat": chat})

    def gate(self, kind: str) -> Gate:
        try:
            return self.gates[kind]
        except KeyError:
            raise ValueError(f"no admission policy for {kind!r}; known: {sorted(self.gates)}") from None

    def enter(self, kind: str, caller_class: str = KEYED, units: int = 1, caller=None):
        return self.gate(kind).enter(caller_class, units, key_of(caller))

    @asynccontextmanager
    async def admit(
        self, kind: str, caller_class: str = KEYED, check: Callable | None = None, *args, units: Units = 1, caller=None
    ):
        """The pipeline's check and admit steps, in that order, for every entry point: `check(*args)` (in a worker
        thread) refuses what it will, then `units` places are taken (a number, or a function of what `check`
        returned: the decisions the request asks for) in `caller`'s fair share (blink.web.callers). Yields (what
        `check` returned, the ticket)."""
        checked = await run_in_threadpool(check, *args) if check is not None else None
        async with self.gate(kind).enter(caller_class, units_of(units, checked), key_of(caller)) as ticket:
            yield checked, ticket

    @contextmanager
    def admit_sync(
        self, kind: str, caller_class: str = KEYED, check: Callable | None = None, *args, units: Units = 1, caller=None
    ):
        """`admit` for code running in a worker thread (the Gradio UI's synchronous handlers)."""
        checked = check(*args) if check is not None else None
        with self.gate(kind).enter_sync(caller_class, units_of(units, checked), key_of(caller)) as ticket:
            yield checked, ticket

    def enter_sync(self, kind: str, caller_class: str = KEYED, units: int = 1, caller=None):
        return self.gate(kind).enter_sync(caller_class, units, key_of(caller))

    def state(self) -> dict:
        """For /healthz: each gate's places, waiters and refusals."""
        return {kind: gate.state() for kind, gate in self.gates.items()}
