"""Loglikelihood of a multiple-choice item (lm-eval's `local-completions` through `/v1/completions` with `echo`):
what scoring K answers after one shared context costs, against one plain pass over the context and one answer.

    .venv/bin/python bench/labels/loglik.py [--model demo|large|PATH] [--context 500] [--choices 4] [--reps 5]
        [--threads 1] [--block 32]

In one process, the sides alternating rep by rep, every side scoring every position of its prompts (a log-softmax
over the whole vocabulary, as `echo` with `logprobs` answers and lm-eval's `hf` backend computes):
- **floor**: one plain forward of the context and one answer (`model(ids).logits`, log-softmaxed): the least any
  scorer pays for one choice;
- **one request**: the K prompts in one call of the backend's `prompt_logprobs` (a request listing them): the
  context runs once, fanned out to the K answers, and the head over its positions once;
- **K requests**: K calls of one prompt each (a client sending one prompt per request, as lm-eval does at batch size
  1): the context is shared through the prefix-state cache (the first prompt saves block-aligned states, the later
  ones resume there), as a server runs it;
- **K requests, no cache**: the same with the prefix-state cache off: nothing shared.
The cache starts empty for every side of every rep (each rep is a new item). Only the model's work is timed (no
HTTP, no tokenizing).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: offline.py and the shared modules
import offline  # noqa: F401 - first: the repository importable, the Hub off

# isort: split

import torch
import workload


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="demo")
    parser.add_argument("--context", type=int, default=500)
    parser.add_argument("--choices", type=int, default=4)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--block", type=int, default=32, help="prefix_block_tokens")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from blink.decide.planner import Engine
    from blink.executor.prefix_cache import PrefixCache
    from blink.executor.prompt_logprobs import prompt_logprobs
    from blink.model.demo import demo_model_dir
    from blink.model.loading import load

    model = str(demo_model_dir(args.model)) if args.model in ("demo", "large") else args.model
    loaded = load(model)
    engine = Engine(loaded, prefix_block_tokens=args.block)
    tokenizer, executor = loaded.tokenizer, engine.executor

    def item(seed: int) -> list[list[int]]:
        rng = random.Random(seed)
        context = tokenizer(
            "Question: " + workload.text_of_tokens(tokenizer, args.context, seed) + "\nAnswer:",
            add_special_tokens=False,
        )["input_ids"]
        return [context + [rng.randrange(1000, 50000) for _ in range(rng.randint(2, 8))] for _ in range(args.choices)]

    def floor(prompts):
        with torch.inference_mode():
            torch.log_softmax(loaded.model(input_ids=torch.tensor([prompts[0]])).logits[0].float(), -1)

    sides = {
        "floor": floor,
        "one request": lambda prompts: prompt_logprobs(executor, prompts, 1),
        f"{args.choices} requests": lambda prompts: [prompt_logprobs(executor, [p], 1) for p in prompts],
        f"{args.choices} requests, no cache": lambda prompts: [prompt_logprobs(executor, [p], 1) for p in prompts],
    }
    budget = executor.prefix_cache.max_bytes
    times = {name: [] for name in sides}
    for side in sides.values():  # warm-up, untimed
        executor.prefix_cache = PrefixCache(budget, args.block)
        side(item(0))
    for rep in range(args.reps):
        prompts = item(rep + 1)
        names = list(sides) if rep % 2 else list(reversed(sides))
        for name in names:
            executor.prefix_cache = PrefixCache(0 if "no cache" in name else budget, args.block)  # a new item: empty
            start = time.perf_counter()
            sides[name](prompts)
            times[name].append(time.perf_counter() - start)
    params = sum(p.numel() for p in loaded.model.parameters()) / 1e6
    print(
        f"model {args.model} ({params:.0f}M params), context {len(prompts[0]) - 8}-{len(prompts[0])} tokens, "
        f"{args.choices} choices, {args.threads} thread(s), {args.reps} reps, "
        f"{args.block}-token blocks\n"
    )
    # on a shared machine the load drifts from rep to rep: each rep's side against the same rep's floor (run next to
    # it), and the fastest of each side (the least disturbed), say more than medians of times taken minutes apart
    floors = times["floor"]
    print("| side | ms (median) | ms (fastest) | / floor (median of the reps') | / floor (fastest) |")
    print("|---|---|---|---|---|")
    for name in sides:
        ratio = statistics.median(t / f for t, f in zip(times[name], floors))
        best = min(times[name]) / min(floors)
        ms, fastest = statistics.median(times[name]) * 1000, min(times[name]) * 1000
        print(f"| {name} | {ms:.1f} | {fastest:.1f} | {ratio:.2f}x | {best:.2f}x |")


if __name__ == "__main__":
    main()
