"""Why every CPU pass runs on one thread (blink/executor/compute_thread.py): the same pass, timed where it runs.

    .venv/bin/python bench/latency/pools.py [--model large] [--tokens 1000] [--reps 9] [--threads 2]

One forward pass of the model's decoder over `--tokens` tokens, three ways, in three fresh processes (an OpenMP
pool, once made, lives as long as its thread):
- **one thread**: every pass on the main thread, the only one that ever runs torch;
- **two threads**: one pass on the main thread first (a server's warm-up), then the timed ones on a second thread;
- **compute thread**: the warm-up and the timed passes through `COMPUTE.call`, as blink runs them.

Each prints the median milliseconds, the cores the process used while timing (CPU seconds over wall seconds)
and its system time: libgomp's workers sleeping and being woken show there.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: offline.py and the shared modules
import offline  # noqa: F401 - first: the repository importable, the Hub off

# isort: split

WAYS = ("one thread", "two threads", "compute thread")


def measure(way: str, model: str, tokens: int, reps: int, threads: int) -> dict:
    import torch

    from blink.executor.compute_thread import COMPUTE
    from blink.executor.decoder import decoder_of
    from blink.model.demo import demo_model_dir
    from blink.model.loading import load

    torch.set_num_threads(threads)
    loaded = load(str(demo_model_dir(model)) if model in ("demo", "large") else model)
    decoder, _ = decoder_of(loaded.model)
    ids = torch.arange(1000, 1000 + tokens)[None]

    @torch.inference_mode()
    def one_pass() -> float:
        start = time.perf_counter()
        decoder(inputs_embeds=decoder.get_input_embeddings()(ids), use_cache=False)
        return time.perf_counter() - start

    def timed() -> dict:
        times = os.times()
        wall = time.perf_counter()
        took = [one_pass() for _ in range(reps)]
        wall, after = time.perf_counter() - wall, os.times()
        cpu = after.user + after.system - times.user - times.system
        return {
            "ms": statistics.median(took) * 1000,
            "cores": cpu / wall,
            "system_s": after.system - times.system,
        }

    if way == "compute thread":
        COMPUTE.call(one_pass)
        return COMPUTE.call(timed)
    one_pass()  # warm-up on the main thread
    if way == "one thread":
        return timed()
    out = {}
    worker = threading.Thread(target=lambda: out.update(timed()))
    worker.start()
    worker.join()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="large", help="demo, large (the ~150M CPU benchmark model) or a path")
    parser.add_argument("--tokens", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--way", choices=WAYS, help=argparse.SUPPRESS)  # one side, in the child process
    args = parser.parse_args()
    if args.way:
        print(json.dumps(measure(args.way, args.model, args.tokens, args.reps, args.threads)))
        return
    print(f"{args.model}, {args.tokens} tokens, {args.threads} torch threads, {args.reps} reps, load {os.getloadavg()}")
    print("\n| where the passes run | median ms | cores used | system s |\n|---|---|---|---|")
    for way in WAYS:
        argv = [sys.executable, __file__, "--way", way, *sys.argv[1:]]
        result = json.loads(subprocess.run(argv, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
        print(f"| {way} | {result['ms']:.0f} | {result['cores']:.2f} | {result['system_s']:.2f} |")


if __name__ == "__main__":
    main()
