"""The one thread that runs this process's forward passes when the model is on the CPU.

torch's CPU kernels run on GNU OpenMP (libgomp), which keeps a pool of worker threads for each thread that opens a
parallel region. Once the pools together hold more threads than there are CPUs, libgomp cuts its spin-wait from
300,000 spins to 100, so between the thousands of small parallel regions of a decoder pass the workers sleep on a
futex and have to be woken. On 2 cores a 1,000-token pass then runs on 1.45 cores instead of 1.98, about 1.25x
slower (bench/RESULTS.md, "One thread for the passes"). A second pool appears as soon as a second thread runs the
model: the warm-up on the main thread and then the batcher, or a chat generator resumed on anyio's workers. So on
the CPU every pass runs here, on one thread, whoever asks. On a GPU the kernels are not OpenMP's, and a call runs
where it is made (inside a ZeroGPU worker, on its own thread).

One thread per process, because the pools it protects are per process. The decision batcher runs its batches here
too (`post`, blink.decide.batching): a decision's way from the event loop to its pass and back is then two
hand-offs between threads, not four.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")
_END = object()


class ComputeThread:
    def __init__(self, name: str = "blink-compute"):
        self.name = name
        self._start()

    def _start(self) -> None:
        self._ident: int | None = None
        self._thread: threading.Thread | None = None  # started with the first call
        self._pool = ThreadPoolExecutor(1, thread_name_prefix=self.name, initializer=self._mark)

    def _mark(self) -> None:
        self._ident = threading.get_ident()
        self._thread = threading.current_thread()

    def alive(self) -> bool:
        return self._thread is None or self._thread.is_alive()

    def post(self, fn: Callable[[], Any]) -> None:
        """`fn()` on the compute thread, after what is already waiting there; nobody waits for it, so `fn` answers
        its own callers and must not raise."""
        self._pool.submit(fn)

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` on the compute thread (directly when already on it); its result or its exception."""
        if threading.get_ident() == self._ident:
            return fn(*args)
        return self._pool.submit(fn, *args).result()

    def iterate(self, items: Iterator[T]) -> Iterator[T]:
        """`items`, each step run on the compute thread, and its close too (the generator's `finally` blocks)."""
        try:
            while (item := self.call(next, items, _END)) is not _END:
                yield item
        finally:
            self.call(items.close)


# a forked child (the ZeroGPU worker) has no copy of the parent's thread: it starts its own when first asked
COMPUTE = ComputeThread()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=COMPUTE._start)


def thread_for(device) -> ComputeThread | None:
    """The thread every pass on `device` runs on: the compute thread for the CPU; None for a GPU (a call runs where
    it is made)."""
    return COMPUTE if device.type == "cpu" else None


def on_cpu_thread(device, fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` on the compute thread when `device` is the CPU, here otherwise."""
    thread = thread_for(device)
    return fn(*args) if thread is None else thread.call(fn, *args)


def iterate_on_cpu_thread(device, items: Iterator[T]) -> Iterator[T]:
    thread = thread_for(device)
    return items if thread is None else thread.iterate(items)
