"""Freed heap handed back to the system after large work (a big pass, decoded images): glibc keeps freed arenas
otherwise, so a process that once ran a 32k-token pass would keep hundreds of MB it no longer uses.

`malloc_trim` walks and locks every arena while it runs (up to ~100 ms on a large heap); a thread that allocates
meanwhile waits for it, the event loop's thread too, holding the GIL, so everything stalls. So trims are
coalesced: a request for one wakes a single background thread that trims at most once per `MIN_INTERVAL_S`
(8 concurrent image requests cost one or two trims, not eight); `give_back_memory(wait=True)` trims now.
"""

from __future__ import annotations

import ctypes
import threading
import time

MIN_INTERVAL_S = 1.0

_wanted = threading.Event()
_started = False
_start_lock = threading.Lock()


def _trim() -> None:
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _trimmer() -> None:
    while True:
        _wanted.wait()
        _wanted.clear()
        _trim()
        time.sleep(MIN_INTERVAL_S)


def give_back_memory(wait: bool = False) -> None:
    """Return freed heap to the operating system (glibc keeps freed arenas otherwise); a no-op elsewhere. Soon
    (coalesced, in the background), or now with `wait`."""
    global _started
    if wait:
        _trim()
        return
    if not _started:
        with _start_lock:
            if not _started:
                threading.Thread(target=_trimmer, name="blink-trim", daemon=True).start()
                _started = True
    _wanted.set()
