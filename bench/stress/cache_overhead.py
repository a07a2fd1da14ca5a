"""Where the prefix-state cache's memory goes, beside the bytes it counts. In this process (no server):

    .venv/bin/python bench/stress/cache_overhead.py [--fill-mib 96] [--budget-mib 512] [--batch 8] [--thread]

The demo model decides distinct states (the soak's mix: nine small notes to one long ticket, one question each),
`--batch` requests per call as the batcher groups them, until the cache counts `--fill-mib`; at each checkpoint:
the process's RSS over its start (after `malloc_trim(0)`), the bytes the cache counts, the bytes its tensors'
storages really hold, with `--python-heap` the Python heap the entries keep (tracemalloc: their objects, keys and
structures, not torch's buffers), then RSS after `malloc_trim(0)`. `--thread` runs the calls on one worker
thread, as `serve`'s compute thread does (its own malloc arena). Run it with `MALLOC_ARENA_MAX` /
`MALLOC_MMAP_THRESHOLD_` set to compare allocators. Written for bench/RESULTS.md (issue 44).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import ctypes
import gc
import sys
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: offline.py and the shared modules
import offline  # noqa: F401 - first: the repository importable, the Hub off

# isort: split

import psutil

QUESTION = {"type": "noul", "instructions": "Is this about the weather?"}


def body(i: int) -> dict:
    if i % 10 == 0:
        state = f"Ticket {i}. " + "The parcel was late and the box was dented when it arrived. " * 40
    else:
        state = f"Note {i}: it may rain at {i % 24}:00 today."
    return {"state": state, "questions": {"q": QUESTION}}


def storage_bytes(cache) -> int:
    from blink.executor.prefix_cache import layer_tensors, storage_bytes

    return storage_bytes(t for entry in cache.entries.values() for _, _, t in layer_tensors(entry.cache))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fill-mib", type=float, default=96)
    parser.add_argument("--budget-mib", type=float, default=512)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--thread", action="store_true")
    parser.add_argument("--checkpoints", type=int, default=4)
    parser.add_argument("--python-heap", action="store_true", help="trace the Python heap (its own traces add RSS)")
    args = parser.parse_args()

    from blink.decide.planner import Engine
    from blink.model.demo import demo_model_dir
    from blink.model.loading import load

    trim = ctypes.CDLL("libc.so.6").malloc_trim
    rss_mb = lambda: psutil.Process().memory_info().rss / 2**20  # noqa: E731
    engine = Engine(load(str(demo_model_dir())), prefix_cache_bytes=int(args.budget_mib * 2**20))
    pool = concurrent.futures.ThreadPoolExecutor(1) if args.thread else None
    run = (lambda fn, *a: pool.submit(fn, *a).result()) if pool else (lambda fn, *a: fn(*a))

    def decide_batch(first: int) -> None:
        prepared = [engine.prepare(body(first + k)) for k in range(args.batch)]
        run(engine.score, [p.prompts for p in prepared])

    for k in range(4):  # warm-up: the passes' own buffers reach their size before the baseline
        decide_batch(10**7 + k * args.batch)
    cache = engine.executor.prefix_cache
    cache.entries.clear()
    cache.lengths.clear()
    cache.bytes = 0
    gc.collect()
    trim(0)
    if args.python_heap:
        tracemalloc.start()
    base_rss, base_py = rss_mb(), tracemalloc.get_traced_memory()[0]
    print(f"RSS at start {base_rss:.0f} MB; budget {args.budget_mib:g} MiB, batch {args.batch}, thread {args.thread}")
    print(
        "\n| entries | counted MiB | storage MiB | Python heap MiB | RSS growth MiB | per counted (per storage) MiB | "
        "after malloc_trim MiB | per counted (per storage) |\n|---|---|---|---|---|---|---|---|"
    )
    step = args.fill_mib / args.checkpoints
    i, mark = 0, step
    while mark <= args.fill_mib + 1e-9:
        while cache.bytes < mark * 2**20 and i < 10**6:
            decide_batch(i)
            i += args.batch
        gc.collect()
        counted = cache.bytes / 2**20
        storage = storage_bytes(cache) / 2**20
        grown = rss_mb() - base_rss
        py = (tracemalloc.get_traced_memory()[0] - base_py) / 2**20
        trim(0)
        trimmed = rss_mb() - base_rss
        print(
            f"| {len(cache.entries)} | {counted:.1f} | {storage:.1f} | {py:.1f} | {grown:.1f} | {grown / counted:.2f} "
            f"({grown / storage:.2f}) | {trimmed:.1f} | {trimmed / counted:.2f} ({trimmed / storage:.2f}) |"
        )
        mark += step
    lengths = [e.length for e in cache.entries.values()]
    print(f"\n{len(lengths)} entries, {sum(lengths) / len(lengths):.0f} tokens on average; {i} requests")


if __name__ == "__main__":
    main()
