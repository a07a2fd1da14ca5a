"""A bound on holders at once, first come first served, shared by event-loop tasks and threads: the requests
preparing at once behind an admission gate (blink.web.admission), the bodies parsed at once (blink.web.bodies)."""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from contextlib import asynccontextmanager, contextmanager


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
