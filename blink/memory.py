"""Freed heap handed back to the system after large work (a big pass, decoded images): glibc keeps freed arenas
otherwise, so a process that once ran a 32k-token pass would keep hundreds of MB it no longer uses."""

from __future__ import annotations

import ctypes


def give_back_memory() -> None:
    """Return freed heap to the operating system (glibc keeps freed arenas otherwise); a no-op elsewhere."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
