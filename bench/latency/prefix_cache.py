"""Issue 14's rows, side by side in one process: a state seen before vs a new one, time outside the model per
request, the cache's memory. Both sides alternate rep by rep on the same model and bodies (medians; ratios > 1
mean the new side is better). No HTTP: the engine's own steps, as a server runs them.

    .venv/bin/python bench/latency/prefix_cache.py [--model large] [--reps 5] [--threads 1]

- `cold / warm S tok x Q q`: `Engine.score` of a state never seen (a fresh seed) vs the same state again (a new
  request with new questions: the state is what repeats); `cold / warm` = the speed-up.
- `outside model Q q` (64-token state): `prepare` + `answer`, rendering with the library (`prepare_inputs`, the
  path before issue 14) vs rendering once.
- `cache memory`: bytes the cache holds per saved state, and per token.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: offline.py and the shared modules
import offline  # noqa: F401 - first: the repository importable, the Hub off

# isort: split

import torch
import workload


def timed(fn, *args):
    start = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="large")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--states", default="512,2200")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from blink.decide.planner import Engine
    from blink.model.demo import demo_model_dir
    from blink.model.loading import load

    model = str(demo_model_dir(args.model)) if args.model in ("demo", "large") else args.model
    loaded = load(model)
    engine = Engine(loaded, prefix_cache_bytes=2 << 30)
    tokenizer = loaded.tokenizer
    print(
        f"model {args.model}: {sum(p.numel() for p in loaded.model.parameters()) / 1e6:.0f}M params, "
        f"{args.threads} thread(s), {args.reps} reps"
    )

    print("\n| row | cold (ms) | warm (ms) | cold / warm | cached tokens |\n|---|---|---|---|---|")
    seed = 1000
    for state_tokens in map(int, args.states.split(",")):
        for n_questions in (1, 6, 16):
            cold, warm, cached = [], [], 0
            for _ in range(args.reps):
                seed += 1
                first = engine.prepare(workload.body(tokenizer, args.model, state_tokens, n_questions, seed))
                again = workload.body(tokenizer, args.model, state_tokens, n_questions, seed)
                again["questions"] = workload.questions(n_questions, seed + 7)  # new questions, same state
                second = engine.prepare(again)
                t, _ = timed(engine.score, [first.prompts])
                cold.append(t)
                t, (scored,) = timed(engine.score, [second.prompts])
                warm.append(t)
                cached = scored.cached_tokens
            c, w = statistics.median(cold) * 1000, statistics.median(warm) * 1000
            print(f"| {state_tokens} tok x {n_questions} q | {c:.1f} | {w:.1f} | {c / w:.2f}x | {cached} |")

    stats = engine.executor.prefix_cache.stats()
    entries = list(engine.executor.prefix_cache.entries.values())
    per_token = sum(e.nbytes for e in entries) / max(1, sum(e.length for e in entries))
    fixed = min(e.nbytes - e.length * engine.executor.kv_bytes_per_token() for e in entries)
    print(
        f"\ncache memory: {stats['entries']} states, {stats['used_mib']:.1f} MiB; "
        f"{engine.executor.kv_bytes_per_token()} B/token of attention KV + {fixed / 2**20:.2f} MiB of DeltaNet "
        f"state per entry ({per_token / 1024:.1f} KiB/token on average here)"
    )

    print("\n| outside model, 64 tok | library (ms) | once (ms) | library / once |\n|---|---|---|---|")
    builder = engine.prompts
    for n_questions in (1, 6, 16):
        sides = {"library": [], "once": []}
        for rep in range(args.reps * 4):
            body = workload.body(tokenizer, args.model, 64, n_questions, 5000 + rep)
            for side in ("library", "once") if rep % 2 else ("once", "library"):
                builder.once.enabled = side == "once"
                t, prepared = timed(engine.prepare, body)
                scores = [[[0.0] * len(read.label_ids) for read in p.reads] for p in prepared.prompts]
                t2, _ = timed(engine.answer, prepared, scores)
                sides[side].append(t + t2)
        builder.once.enabled = True
        lib, once = (statistics.median(sides[s]) * 1000 for s in ("library", "once"))
        print(f"| {n_questions} q | {lib:.2f} | {once:.2f} | {lib / once:.1f}x |")


if __name__ == "__main__":
    main()
