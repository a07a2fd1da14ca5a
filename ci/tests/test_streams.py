"""blink.web.streams.GeneratorStream: a blocking generator pulled in worker threads, keep-alives while it works,
closed in a worker thread (never on the event loop, never while it executes)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from blink.web.streams import KEEPALIVE, GeneratorStream


class Recorded:
    """A generator that records which threads ran it and whether it was closed."""

    def __init__(self, items, delay: float = 0.0):
        self.items, self.delay = items, delay
        self.threads: set[int] = set()
        self.closed_on: int | None = None
        self.finished = False

    def __call__(self):
        try:
            for item in self.items:
                self.threads.add(threading.get_ident())
                time.sleep(self.delay)
                yield item
            self.finished = True
        except GeneratorExit:
            self.closed_on = threading.get_ident()
            raise


def collect(stream) -> list:
    async def run():
        return [item async for item in stream]

    return asyncio.run(run())


def test_items_come_from_worker_threads_in_order():
    gen = Recorded(["a", "b", "c"])
    assert collect(GeneratorStream(gen)) == ["a", "b", "c"]
    assert gen.finished and threading.get_ident() not in gen.threads


def test_keepalive_ticks_while_an_item_is_slow():
    gen = Recorded(["late"], delay=0.35)
    items = collect(GeneratorStream(gen, keepalive_s=0.1))
    assert items[-1] == "late" and items.count(KEEPALIVE) >= 2 and set(items[:-1]) == {KEEPALIVE}


def test_aclose_closes_in_a_worker_thread():
    gen = Recorded(["a", "b", "c"])

    async def run():
        stream = GeneratorStream(gen)
        assert await stream.__anext__() == "a"
        await stream.aclose()
        return [item async for item in stream]

    assert asyncio.run(run()) == []
    assert gen.closed_on is not None and gen.closed_on != threading.get_ident()


def test_aclose_during_a_pull_closes_after_it():
    gen = Recorded(["a", "b"], delay=0.3)

    async def run():
        stream = GeneratorStream(gen, keepalive_s=0.05)
        assert await stream.__anext__() is KEEPALIVE  # "a" is being pulled
        await stream.aclose()  # returns at once; the close waits for the pull
        await asyncio.sleep(0.6)

    asyncio.run(run())
    assert gen.closed_on is not None and not gen.finished


def test_aclose_before_the_first_item_never_starts_the_generator():
    started = []

    async def run():
        stream = GeneratorStream(lambda: started.append(1) or iter(["x"]))
        await stream.aclose()
        return [item async for item in stream]

    assert asyncio.run(run()) == [] and started == []


def test_the_generators_exception_reaches_the_consumer():
    def failing():
        yield "ok"
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        collect(GeneratorStream(failing))
