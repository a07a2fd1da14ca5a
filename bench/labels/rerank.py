"""Reranking against the compute floor, side by side in one process: what ranking N documents costs against what
their tokens cost.

    .venv/bin/python bench/labels/rerank.py [--model large] [--documents 32] [--doc-tokens 200] [--reps 5] [--threads 2]

- **engine**: a rerank's steps as the server runs them (`DecisionService.run_many`, no HTTP): each document a
  decision (its state, the query in the one `noul` question of `rerank_question`), planned, all scored in ONE call,
  answered.
- **served**: the same rerank's round trip to `python -m blink serve` on the same model (`POST /v1/rerank`,
  loopback HTTP, the server's defaults): the engine plus everything a server adds.
- **floor**: one forward pass of the same model's decoder (no LM head) over the same tokens: a batch of N rows of
  the prompts' mean length (the documents are independent: no row attends to another, and equal rows need no
  padding). **floor, one sequence**: the same tokens as one sequence (attention over all of them), for reference.
- **cold**: documents never seen. **warm**: the same documents again with another query (RAG reranks the same chunks
  for many queries): the prefix-state cache spares each document's prefill; its floor is the decoder over the
  tokens the request really had to run (a batch of N rows of the new tokens), which reads no state at all, so it
  is below what any exact reading can cost (bench/latency/floor.py's "floor resuming the state" is the tighter one).

The sides alternate rep by rep (medians); the machine's load is printed before and after: read the ratios.
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
from latency.floor import Floor, bench_engine, load_average
from servers import DEMO_ROOT, blink_serve

from helpers import running

QUERIES = ("Does the customer ask for a refund of a damaged order?", "Is a delivery address being changed?")


class BatchFloor(Floor):
    def batched(self, rows: int, n: int) -> float:
        from blink.executor.compute_thread import COMPUTE

        return COMPUTE.call(self._timed_batch, rows, n)

    @torch.inference_mode()
    def _timed_batch(self, rows: int, n: int) -> float:
        ids = self._tokens(n).repeat(rows, 1)
        start = time.perf_counter()
        self.decoder(inputs_embeds=self.embed(ids), use_cache=False)
        return time.perf_counter() - start


def rerank_once(engine, question: str, documents: list[str]) -> tuple[float, list[int], int]:
    """One rerank through the engine, as run_many runs it: seconds, each prompt's tokens, the cached tokens."""
    bodies = [
        {"state": doc, "questions": {"relevant": {"type": "noul", "instructions": question}}} for doc in documents
    ]
    start = time.perf_counter()
    prepared = [engine.prepare(body) for body in bodies]
    scored = engine.score([p.prompts for p in prepared])
    for p, s in zip(prepared, scored, strict=True):
        engine.answer(p, s.result())
    took = time.perf_counter() - start
    return took, [len(p.prompts[0].ids) for p in prepared], sum(s.cached_tokens for s in scored)


def served_once(client: httpx.Client, query: str, documents: list[str]) -> float:
    start = time.perf_counter()
    r = client.post("/v1/rerank", json={"query": query, "documents": documents})
    took = time.perf_counter() - start
    r.raise_for_status()
    return took


def ratio(ms: dict, side: str, floor: str) -> str:
    return f"{ms[side]:.0f} / {ms[floor]:.0f} ms = {ms[side] / ms[floor]:.2f}x"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="large", help="demo, large (the ~150M CPU benchmark model) or a path")
    parser.add_argument("--documents", type=int, default=32)
    parser.add_argument("--doc-tokens", type=int, default=200)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from blink.settings import RERANK_QUESTION

    model, loaded, engine, params = bench_engine(args.model)
    tokenizer = loaded.tokenizer
    floor = BatchFloor(
        loaded, tokenizer(workload.text_of_tokens(tokenizer, 256, 0), add_special_tokens=False)["input_ids"]
    )
    print(
        f"model {args.model} ({params:.0f}M params), {args.threads} thread(s), {args.reps} reps, "
        f"{args.documents} documents of {args.doc_tokens} tokens"
    )
    print(f"load average before: {load_average()}")
    questions = [RERANK_QUESTION.replace("{query}", q) for q in QUERIES]

    def docs(seed: int) -> list[str]:
        return [workload.text_of_tokens(tokenizer, args.doc_tokens, seed * 1000 + i) for i in range(args.documents)]

    rerank_once(engine, questions[0], docs(0)[:2])  # warm the code paths
    floor.batched(2, 64)
    names = ("cold", "cold_served", "cold_floor", "cold_floor_one", "warm", "warm_served", "warm_floor")
    rows = {k: [] for k in names}
    with (
        running(blink_serve(model=model), DEMO_ROOT, name="rerank-serve") as url,
        httpx.Client(base_url=url, timeout=600) as client,
    ):
        served_once(client, QUERIES[0], docs(1)[:2])
        tokens = new = 0
        for rep in range(args.reps):
            mine, theirs = docs(10 + 2 * rep), docs(11 + 2 * rep)  # never seen: one set here, one by the server
            lengths: list[int] = []
            steps = [
                ("cold", lambda: rerank_once(engine, questions[0], mine)),
                ("cold_served", lambda: served_once(client, QUERIES[0], theirs)),
            ]
            for name, step in steps if rep % 2 == 0 else steps[::-1]:  # alternate who goes first
                out = step()
                if name == "cold":
                    rows[name].append(out[0])
                    lengths = out[1]
                else:
                    rows[name].append(out)
            tokens = sum(lengths)
            mean = round(tokens / len(lengths))
            rows["cold_floor"].append(floor.batched(len(lengths), mean))
            rows["cold_floor_one"].append(floor(tokens))
            took, warm_lengths, cached = rerank_once(engine, questions[1], mine)  # the same documents, another query
            new = sum(warm_lengths) - cached
            rows["warm"].append(took)
            rows["warm_served"].append(served_once(client, QUERIES[1], theirs))
            rows["warm_floor"].append(floor.batched(len(warm_lengths), max(1, round(new / len(warm_lengths)))))
    ms = {k: statistics.median(v) * 1000 for k, v in rows.items()}
    print(
        "\n| documents | tokens (cold / warm new) | cold: engine / floor | cold: served / floor "
        "| cold: floor one sequence / floor | warm: engine / floor over the new tokens "
        "| warm: served / floor over the new tokens |"
    )
    print("|---|---|---|---|---|---|---|")
    print(
        f"| {args.documents} | {tokens} / {new} | {ratio(ms, 'cold', 'cold_floor')} "
        f"| {ratio(ms, 'cold_served', 'cold_floor')} | {ratio(ms, 'cold_floor_one', 'cold_floor')} "
        f"| {ratio(ms, 'warm', 'warm_floor')} | {ratio(ms, 'warm_served', 'warm_floor')} |"
    )
    print(f"\nload average after: {load_average()}")


if __name__ == "__main__":
    main()
