"""Fair queuing between callers: what waits is served in the order of start-time fair queuing, by work, not requests.

Each caller has a FIFO of its own; an entry asking for `units` of work is tagged as it arrives with a start
`max(now, the caller's last finish)` and a finish `start + units`, where `now` (the virtual time) is the start of
the entry served last. The next entry served is the one with the smallest start among the callers' heads (ties:
the earlier arrival). A caller with a long backlog has its entries tagged far ahead, so a caller arriving with one
entry is tagged `now` and served next, whatever the backlog in front of it; a caller asking for 32 units at once
is served as if it had asked 32 times. A caller that stays idle gains no credit: its next entry starts at `now`.

Used by the admission gates (blink.web.admission: the places of a kind of work, shared between the callers
waiting) and by the batcher (blink.decide.batching: which admitted request goes into the next batch). Not
thread-safe: its owner holds a lock or is the only thread using it.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any


@dataclass(order=True)
class Entry:
    start: float
    seq: int
    key: Hashable = field(compare=False)
    units: int = field(compare=False)
    item: Any = field(compare=False)


class FairQueue:
    """Entries of many callers (`key`), served fairly by their units of work."""

    def __init__(self):
        self.queues: dict[Hashable, deque[Entry]] = {}
        self.finish: dict[Hashable, float] = {}  # each caller's last finish tag, while it is ahead of `now`
        self.now = 0.0
        self.units = 0  # units waiting, all callers
        self.units_by: dict[Hashable, int] = {}  # units waiting, per caller with some
        self.count = 0  # entries waiting
        self._seq = itertools.count()

    def __len__(self) -> int:
        return self.count

    def __bool__(self) -> bool:
        return self.count > 0

    def push(self, key: Hashable, units: int, item: Any) -> Entry:
        start = max(self.now, self.finish.get(key, self.now))
        entry = Entry(start, next(self._seq), key, units, item)
        self.finish[key] = start + units
        self.queues.setdefault(key, deque()).append(entry)
        self.units += units
        self.units_by[key] = self.units_by.get(key, 0) + units
        self.count += 1
        return entry

    def head(self, eligible: Callable[[Any], bool] | None = None) -> Entry | None:
        """The entry served next: the smallest start among the callers' heads (those `eligible(item)` only)."""
        heads = (q[0] for q in self.queues.values())
        return min((e for e in heads if eligible is None or eligible(e.item)), default=None)

    def pop(self, entry: Entry) -> Any:
        """Serve `entry` (a head, as `head` returned it): virtual time moves to its start."""
        self.now = max(self.now, entry.start)
        self._take(entry, self.queues[entry.key].popleft)
        return entry.item

    def remove(self, entry: Entry) -> None:
        """An entry leaving unserved (its caller gave up): its tag is given back when it was its caller's last."""
        queue = self.queues[entry.key]
        if queue[-1] is entry:
            self.finish[entry.key] = entry.start
        self._take(entry, lambda: queue.remove(entry))

    def _take(self, entry: Entry, take) -> None:
        take()
        self.units -= entry.units
        self.units_by[entry.key] -= entry.units
        self.count -= 1
        if not self.queues[entry.key]:
            del self.queues[entry.key], self.units_by[entry.key]
        if len(self.finish) > 2 * len(self.queues) + 16:
            self._forget()

    def _forget(self) -> None:
        """Callers with nothing waiting and no finish ahead of `now` carry nothing: dropped, so the table stays as
        small as the callers waiting, however many have come and gone."""
        stale = [k for k, f in self.finish.items() if f <= self.now and k not in self.queues]
        for key in stale:
            del self.finish[key]

    def waiting(self, key: Hashable) -> int:
        """The units one caller has waiting."""
        return self.units_by.get(key, 0)

    def ahead(self, entry: Entry) -> int:
        """The units served before `entry` (itself included), as the queue stands."""
        return sum(e.units for q in self.queues.values() for e in q if e <= entry)

    def entries(self):
        return (e for q in self.queues.values() for e in q)
