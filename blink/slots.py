"""How many chat generations run at once: past the limit a chat is refused with 529 + Retry-After (the SDKs
retry it) instead of slowing every running chat down and queueing without bound.

One `ChatSlots` lives on the Context, so the API's chat and the Space's UI chat share it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from .errors import Overloaded


class ChatSlots:
    def __init__(self, total: int = 4):
        self.total = int(total)
        self._running = 0
        self._lock = threading.Lock()  # the UI chat takes slots from Gradio's worker threads

    @property
    def running(self) -> int:
        return self._running

    def take(self) -> None:
        with self._lock:
            if self._running >= self.total:
                raise Overloaded("blink is busy: every chat slot is generating. Retry after a short delay.")
            self._running += 1

    def release(self) -> None:
        with self._lock:
            self._running -= 1

    @contextmanager
    def held(self) -> Iterator[None]:
        """One slot for the length of the block (refused with Overloaded when none is free)."""
        self.take()
        try:
            yield
        finally:
            self.release()

    def health(self) -> dict:
        return {"max_concurrent": self.total, "running": self._running}
