"""One bridge from a blocking generator (the GPU's) to async code (the routes).

`GeneratorStream(start, keepalive_s)` calls `start()` and pulls the generator it returns one item at a time in
a worker thread (anyio's thread pool, as Starlette's `iterate_in_threadpool` does), so the event loop never
blocks on the GPU. It yields the generator's own items, and `KEEPALIVE` each time `keepalive_s` passes with
no item (an SSE route sends a comment, so proxies and clients don't time out while ZeroGPU queues).

`aclose()` closes the generator in a worker thread too: on ZeroGPU closing the wrapper tells the worker to
stop and release the GPU. A pull in flight can't be interrupted, so when one is, the close waits for it in
a task of its own and `aclose()` returns at once (a generator that is still executing can't be closed).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

import anyio

log = logging.getLogger("blink")

T = TypeVar("T")


class KeepAlive:
    """No item for `keepalive_s` seconds: the stream is alive, the generator is still working."""

    def __repr__(self) -> str:
        return "KEEPALIVE"


KEEPALIVE = KeepAlive()
_CLOSING: set[asyncio.Task] = set()  # closes still waiting for their pull (a task must be referenced to run)


class _Exhausted(Exception):
    """StopIteration can't cross a thread pool's future (it would end the awaiting coroutine instead)."""


class GeneratorStream(Generic[T]):
    def __init__(self, start: Callable[[], Iterator[T]], keepalive_s: float | None = None):
        self._start = start
        self._generator: Iterator[T] | None = None
        self._pulling: asyncio.Future | None = None
        self._closed = False
        self.keepalive_s = keepalive_s

    def __aiter__(self) -> GeneratorStream[T]:
        return self

    async def __anext__(self) -> T | KeepAlive:
        if self._closed:
            raise StopAsyncIteration
        if self._pulling is None:
            self._pulling = asyncio.ensure_future(anyio.to_thread.run_sync(self._pull))
        done, _ = await asyncio.wait({self._pulling}, timeout=self.keepalive_s)
        if not done:
            return KEEPALIVE
        pulled, self._pulling = self._pulling, None
        try:
            return pulled.result()
        except _Exhausted:
            await self.aclose()
            raise StopAsyncIteration from None
        except BaseException:
            await self.aclose()
            raise

    def _pull(self) -> T:
        if self._generator is None:
            self._generator = self._start()
        try:
            return next(self._generator)
        except StopIteration:
            raise _Exhausted from None

    async def aclose(self) -> None:
        """Stop pulling and close the generator (in a worker thread). Safe to call more than once, and
        before the first item (then the generator may never have been made)."""
        if self._closed:
            return
        self._closed = True
        pulling, self._pulling = self._pulling, None
        if pulling is None:
            with anyio.CancelScope(shield=True):
                await self._close()
            return
        task = asyncio.ensure_future(self._close_after(pulling))
        _CLOSING.add(task)
        task.add_done_callback(_CLOSING.discard)

    async def _close_after(self, pulling: asyncio.Future) -> None:
        await asyncio.wait({pulling})
        if not pulling.cancelled():
            pulling.exception()  # retrieved: nobody is left to hear it
        await self._close()

    async def _close(self) -> None:
        close = getattr(self._generator, "close", None)
        if close is None:
            return
        try:
            await anyio.to_thread.run_sync(close)
        except Exception:  # noqa: BLE001 - the client is gone: all that is left is to say it in the log
            log.exception("closing a generator failed")
