"""A moderation against the compute floor, side by side in one run: what `/v1/moderations` costs for one input against
what its tokens cost.

    .venv/bin/python bench/labels/moderation.py [--model large] [--input-tokens 300] [--reps 7] [--threads 2]

- **engine**: the decision a moderation is (the input as the state, the default policy's 13 categories as `noul`
  questions) through the engine's steps as a server runs them (`prepare`, `score`, `answer`; no HTTP).
- **served**: `POST /v1/moderations` with another input of the same length to `python -m blink serve` on the same
  model (loopback HTTP, the server's defaults): the engine plus everything a server adds.
- **floor over the request**: one forward pass of the decoder (no LM head) over the tokens the request runs (the
  input once, plus the 13 questions' own tokens), one sequence, no cache: bench/latency/floor.py's floor.
- **floor over the input**: the same pass over the input's tokens alone, what the issue's target names ("one pass
  over it"): the 13 questions' tokens are work a pass over the input alone never does.

Every rep moderates inputs never seen (cold: nothing from the prefix-state cache). The sides alternate rep by rep
(medians); the machine's load is printed before and after: read the ratios, measured side by side.
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

import httpx
import torch
import workload
from latency.floor import Floor, bench_engine, blink_once, load_average, ratio, request_tokens
from servers import DEMO_ROOT, blink_serve

from blink.moderation_policy import load_policy
from helpers import running

POLICY = load_policy(None)


def decision(text: str) -> dict:
    """The decision `/v1/moderations` makes of one input (blink.api.moderations)."""
    return {"state": text, "questions": POLICY.questions()}


def served_once(client: httpx.Client, text: str) -> float:
    start = time.perf_counter()
    r = client.post("/v1/moderations", json={"model": "bench", "input": text})
    took = time.perf_counter() - start
    r.raise_for_status()
    assert len(r.json()["results"][0]["category_scores"]) == len(POLICY.categories)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="large", help="demo, large (the ~150M CPU benchmark model) or a path")
    parser.add_argument("--input-tokens", type=int, default=300)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    model, loaded, engine, params = bench_engine(args.model)
    tokenizer = loaded.tokenizer
    floor = Floor(loaded, tokenizer(workload.text_of_tokens(tokenizer, 256, 0), add_special_tokens=False)["input_ids"])
    print(f"model {args.model} ({params:.0f}M params), {args.threads} thread(s), {args.reps} reps")
    print(f"load average before: {load_average()}")
    blink_once(engine, decision(workload.text_of_tokens(tokenizer, 64, 1)))  # warm the code paths
    floor(64)

    with (
        running(blink_serve(model=model), DEMO_ROOT, name="moderation-serve") as url,
        httpx.Client(base_url=url, timeout=300) as client,
    ):
        served_once(client, workload.text_of_tokens(tokenizer, 64, 2))
        rows = {k: [] for k in ("engine", "served", "floor", "floor_input")}
        tokens = input_tokens = 0
        for rep in range(args.reps):
            text = workload.text_of_tokens(tokenizer, args.input_tokens, 20_000 + 2 * rep)
            other = workload.text_of_tokens(tokenizer, args.input_tokens, 20_001 + 2 * rep)
            prepared = engine.prepare(decision(text))
            tokens = request_tokens(prepared.prompts)
            input_tokens = len(tokenizer(text, add_special_tokens=False)["input_ids"])
            steps = [
                ("floor", lambda: floor(tokens)),
                ("floor_input", lambda: floor(input_tokens)),
                ("engine", lambda: blink_once(engine, decision(text))[0]),
                ("served", lambda: served_once(client, other)),
            ]
            for name, step in steps if rep % 2 == 0 else steps[::-1]:  # alternate who goes first
                rows[name].append(step())
    ms = {k: statistics.median(v) * 1000 for k, v in rows.items()}
    print(
        "\n| categories | tokens (request / input) | engine / floor over the request | served / floor over the "
        "request | engine / floor over the input | served / floor over the input |"
    )
    print("|---|---|---|---|---|---|")
    print(
        f"| {len(POLICY.categories)} | {tokens} / {input_tokens} | {ratio(ms, 'engine', 'floor')} "
        f"| {ratio(ms, 'served', 'floor')} | {ratio(ms, 'engine', 'floor_input')} "
        f"| {ratio(ms, 'served', 'floor_input')} |"
    )
    print(f"\nload average after: {load_average()}")


if __name__ == "__main__":
    main()
