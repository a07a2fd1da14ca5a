"""The Gated DeltaNet rule's chunk (blink/executor/passes.py `delta_rule_chunk`) against the model's own 64, side by
side in one process: the same requests scored both ways, alternating rep by rep.

    .venv/bin/python bench/latency/chunk.py [--model large] [--state-tokens 1000] [--questions 1,6,16] [--reps 9]

- **passes**: one forward pass each way at chunk 64, 32 and 16: prefills of 300 / 1,004 / 2,200 tokens, and suffix
  rows (2 and 6 rows of 8 to 200 tokens) fanned out from a prefilled 1,004-token state.
- **requests**: `Engine.score` on cold requests (a state never seen) and warm ones (the same state, new questions,
  resumed from the prefix-state cache), with the executor's chunk choice on (`chosen`) and off (`64`: the model's
  own, as before); medians and 64 / chosen (> 1: the choice is faster), and the largest difference in any label
  logit between the two.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: offline.py and the shared modules
import offline  # noqa: F401 - first: the repository importable, the Hub off

# isort: split

import torch
import workload

from blink.executor.compute_thread import COMPUTE
from blink.executor.prefix_cache import shared_structure

CHUNKS = (64, 32, 16)


def passes(executor, reps: int) -> None:
    ids = torch.randint(1000, 50000, (4000,), generator=torch.Generator().manual_seed(0))

    @torch.inference_mode()
    def prefill(n: int, chunk: int | None, cache=None) -> float:
        embeds = executor.embed(ids[:n])[None]
        mask = torch.ones(1, n, dtype=torch.long)
        cache = cache if cache is not None else executor.new_cache()
        start = time.perf_counter()
        forward(executor, embeds, mask, torch.arange(n)[None], torch.arange(n).expand(3, 1, n), cache, chunk)
        return time.perf_counter() - start

    state = executor.new_cache()
    COMPUTE.call(prefill, 1004, 64, state)

    @torch.inference_mode()
    def suffix(rows: int, span: int, chunk: int) -> float:
        cache = shared_structure(state)
        cache.reorder_cache(torch.zeros(rows, dtype=torch.long))
        embeds = executor.embed(ids[1004 : 1004 + span]).expand(rows, span, -1).contiguous()
        mask = torch.ones(rows, 1004 + span, dtype=torch.long)
        text = torch.arange(1004, 1004 + span).expand(rows, span)
        start = time.perf_counter()
        forward(executor, embeds, mask, text, text.expand(3, rows, span), cache, chunk)
        return time.perf_counter() - start

    cases = [(f"prefill {n} tokens", lambda c, n=n: prefill(n, c)) for n in (300, 1004, 2200)]
    cases += [(f"{r} rows x {s}", lambda c, r=r, s=s: suffix(r, s, c)) for r in (2, 6) for s in (8, 23, 58, 76, 200)]
    print("\n| pass | " + " | ".join(f"chunk {c} (ms)" for c in CHUNKS) + " | fastest |")
    print("|---|" + "---|" * (len(CHUNKS) + 1))
    for name, run in cases:
        got = {c: [] for c in CHUNKS}
        for rep in range(reps + 1):
            for chunk in CHUNKS if rep % 2 == 0 else CHUNKS[::-1]:
                took = COMPUTE.call(run, chunk)
                if rep:
                    got[chunk].append(took * 1000)
        ms = {c: statistics.median(v) for c, v in got.items()}
        print(f"| {name} | " + " | ".join(f"{ms[c]:.1f}" for c in CHUNKS) + f" | {min(ms, key=ms.get)} |")


def forward(executor, embeds, mask, text, rope, cache, chunk: int) -> None:
    """The decoder as the executor runs it (`Executor._forward`), with the rule's chunk given instead of chosen."""
    position_ids = torch.cat([text[None], rope]) if executor.multimodal_rope else text
    executor.base(
        inputs_embeds=embeds,
        attention_mask=mask,
        position_ids=position_ids,
        use_cache=True,
        cache=cache,
        chunk_size=chunk,
    )


def requests(engine, fresh, tokenizer, args) -> None:
    executor = engine.executor
    print("\n| questions | cold: 64 / chosen (ms) | 64 / chosen | warm: 64 / chosen (ms) | 64 / chosen | max Δ logit |")
    print("|---|---|---|---|---|---|")
    seed = 50_000
    for n_questions in map(int, args.questions.split(",")):
        got = {k: [] for k in ("cold 64", "cold chosen", "warm 64", "warm chosen")}
        worst = 0.0
        for rep in range(args.reps + 1):
            for side in ("64", "chosen") if rep % 2 == 0 else ("chosen", "64"):
                seed += 1
                body = workload.body(tokenizer, args.model, args.state_tokens, n_questions, seed)
                again = {**body, "questions": workload.questions(n_questions, seed + 7)}
                executor.reference_delta_rule = side == "chosen"
                for kind, request in (("cold", body), ("warm", again)):
                    prompts = engine.prepare(request).prompts
                    start = time.perf_counter()
                    engine.score([prompts])
                    if rep:
                        got[f"{kind} {side}"].append((time.perf_counter() - start) * 1000)
            executor.reference_delta_rule = True
            worst = max(worst, exact(fresh, body))
        ms = {k: statistics.median(v) for k, v in got.items()}
        cells = [
            f"{ms[f'{kind} 64']:.0f} / {ms[f'{kind} chosen']:.0f} | {ms[f'{kind} 64'] / ms[f'{kind} chosen']:.3f}x"
            for kind in ("cold", "warm")
        ]
        print(f"| {n_questions} | {' | '.join(cells)} | {worst:.1e} |")


def exact(engine, body) -> float:
    """The largest label-logit difference between the chunk choice and the model's 64 on one request, scored from
    scratch (`engine` has no prefix-state cache)."""
    executor = engine.executor
    prompts = engine.prepare(body).prompts
    flat = {}
    try:
        for chosen in (False, True):
            executor.reference_delta_rule = chosen
            flat[chosen] = [x for p in engine.score([prompts])[0].result() for r in p for x in r]
    finally:
        executor.reference_delta_rule = True
    return max(abs(a - b) for a, b in zip(flat[False], flat[True]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="large")
    parser.add_argument("--state-tokens", type=int, default=1000)
    parser.add_argument("--questions", default="1,6,16")
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--skip-passes", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from blink.decide.planner import Engine
    from blink.model.demo import demo_model_dir
    from blink.model.loading import load

    loaded = load(str(demo_model_dir(args.model)) if args.model in ("demo", "large") else args.model)
    engine = Engine(loaded, prefix_cache_bytes=2 << 30)
    print(f"uptime: {os.popen('uptime').read().strip()}")
    print(
        f"model {args.model}, {args.threads} threads, {args.reps} reps; reference rule chosen: "
        f"{engine.executor.reference_delta_rule}"
    )
    if not args.skip_passes:
        passes(engine.executor, args.reps)
    requests(engine, Engine(loaded, prefix_cache_bytes=0), loaded.tokenizer, args)
    print(f"\nuptime: {os.popen('uptime').read().strip()}")


if __name__ == "__main__":
    main()
