"""1,000 questions over one state against the compute floor of their tokens, side by side in one process.

    .venv/bin/python bench/latency/many_questions.py [--model large] [--state-tokens 500] [--questions 1000]
        [--mix ncs]

One decision of `--questions` questions (bench/workload.py's, choices without descriptions; `--mix` the kinds in
turn: `ncs` noul, choice of 4, score of 3-5, ~43 tokens a question as rendered; `nnnc` three nouls to a choice, ~31)
over one ~`--state-tokens` state, the most a request may ask (the limits' default):

- **engine**: the engine's steps for it (`prepare`, `score`, `answer`; no HTTP), a state never seen each rep;
- **served**: the same request's round trip to `python -m blink serve` (its defaults), another new state;
- **floor**: the decoder alone (no LM head, no cache kept) over the same tokens: the state once as one sequence,
  then the questions' tokens as a batch of sequences of their mean length, at the best of batch sizes
  16 / 64 / 256 (measured first). It is a floor that no exact answer reaches: each question's tokens must also
  attend to the state's (the engine pays that; the floor does not);
- **continuing**: the issue's floor, the decoder alone over the state once, then the questions' tokens as batches
  continuing from it (attending to its cache, fanned out to one row per question), at the same batch size.

The sides alternate rep by rep (medians); the load average is printed before and after: read the ratios.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: offline.py and the shared modules
import offline  # noqa: F401 - first: the repository importable, the Hub off

# isort: split

import httpx
import workload
from floor import Floor, bench_engine, blink_once, load_average, request_tokens, served_once
from servers import DEMO_ROOT, blink_serve

from helpers import running

BATCHES = (16, 64, 256)


KINDS = {"n": "noul", "c": "choice", "s": "score"}


def questions(count: int, seed: int, mix: str = "ncs") -> dict:
    """`count` questions of the kinds `mix` names in turn: bench/workload.py's, choices without descriptions."""
    pool: dict[str, list] = {kind: [] for kind in KINDS.values()}
    for q in workload.questions(3 * count, seed).values():
        if q["type"] == "choice":
            q["criteria"] = dict.fromkeys(q["criteria"])
        pool[q["type"]].append(q)
    return {f"q{i:04d}": pool[KINDS[mix[i % len(mix)]]][i // len(mix)] for i in range(count)}


def request(tokenizer, model: str, state_tokens: int, count: int, seed: int, mix: str) -> dict:
    return {**workload.body(tokenizer, model, state_tokens, 0, seed), "questions": questions(count, seed, mix)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="large", help="demo, large (the ~150M CPU benchmark model) or a path")
    parser.add_argument("--state-tokens", type=int, default=500)
    parser.add_argument("--questions", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--mix", default="ncs", help="the kinds of question in turn: n noul, c choice, s score")
    args = parser.parse_args()
    if not args.mix or set(args.mix) - set(KINDS):
        parser.error("--mix: letters n, c and s only")

    model, loaded, engine, params = bench_engine(args.model, prefix_cache_bytes=0)
    tokenizer = loaded.tokenizer
    floor = Floor(loaded, tokenizer(workload.text_of_tokens(tokenizer, 256, 0), add_special_tokens=False)["input_ids"])
    print(f"model {args.model} ({params:.0f}M params), {args.reps} reps; load average before: {load_average()}")
    body = request(tokenizer, args.model, args.state_tokens, args.questions, 1, args.mix)
    prompts = engine.prepare(body).prompts
    total, state = request_tokens(prompts), prompts[0].state_end
    per_question = (total - state) / len(prompts)
    length = max(1, round(per_question))
    blink_once(engine, body)  # warm the code paths
    best = min(BATCHES, key=lambda b: floor.rows(len(prompts), length, b))
    print(f"{len(prompts)} questions, {total} tokens: state {state}, {per_question:.1f} each; floor batch {best}")

    sides = {"engine": [], "served": [], "floor": [], "continuing": []}
    with (
        running(blink_serve(model=model), DEMO_ROOT, name="many-questions-serve") as url,
        httpx.Client(base_url=url, timeout=900) as client,
    ):
        served_once(client, request(tokenizer, args.model, args.state_tokens, args.questions, 2, args.mix))  # warm
        for rep in range(args.reps):
            ours = request(tokenizer, args.model, args.state_tokens, args.questions, 10 + 2 * rep, args.mix)
            theirs = request(tokenizer, args.model, args.state_tokens, args.questions, 11 + 2 * rep, args.mix)
            steps = [
                ("floor", lambda: floor(state) + floor.rows(len(prompts), length, best)),
                ("continuing", lambda: floor(state) + floor.rows_resumed(state, len(prompts), length, best)),
                ("engine", lambda: blink_once(engine, ours)[0]),
                ("served", lambda: served_once(client, theirs)),
            ]
            for name, step in steps if rep % 2 == 0 else steps[::-1]:  # alternate who goes first
                sides[name].append(step())
    ms = {name: 1000 * statistics.median(times) for name, times in sides.items()}
    print(f"load average after: {load_average()}\n")
    print("| questions | tokens (state + questions) | floor | engine | served |")
    print("|---|---|---|---|---|")
    for name in ("floor", "continuing"):
        print(
            f"| {len(prompts)} | {state} + {total - state} | {name}: {ms[name]:.0f} ms | {ms['engine']:.0f} ms = "
            f"{ms['engine'] / ms[name]:.2f}x | {ms['served']:.0f} ms = {ms['served'] / ms[name]:.2f}x |"
        )


if __name__ == "__main__":
    main()
