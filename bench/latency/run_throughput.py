"""The throughput rows of bench/latency/run.py: closed-loop clients against our unbatched and batched servers, the
same bodies to each, and the batcher's mean batch size from /healthz."""

from __future__ import annotations

import asyncio
import math

import httpx
import workload
from run_latency import median
from servers import Server, closed_loop

THROUGHPUT_STATE = 64  # each client: its own ~64-token state, one question per request


def measure_throughput(
    unbatched: Server, batched: Server, tokenizer, model_name: str, clients: int, per_client: int, reps: int = 2
) -> dict:
    bodies = [
        [
            {
                "model": model_name,
                "state": workload.text_of_tokens(tokenizer, THROUGHPUT_STATE, seed=7000 + c),
                "questions": workload.questions(1, seed=c * 31 + k),
            }
            for k in range(per_client)
        ]
        for c in range(clients)
    ]
    got = {"unbatched": [], "batched": []}
    servers = {"unbatched": unbatched, "batched": batched}
    before = batcher_stats(batched)
    for rep in range(reps):
        order = ["unbatched", "batched"] if rep % 2 == 0 else ["batched", "unbatched"]
        for name in order:
            servers[name].revive()
            got[name].append(asyncio.run(closed_loop(servers[name].url, bodies)))
    after = batcher_stats(batched)
    batches = after.get("batches", 0) - before.get("batches", 0)
    row = {
        "clients": clients,
        "requests_each": per_client,
        "reps": reps,
        "unbatched_rps": median([g["rps"] for g in got["unbatched"]]),
        "batched_rps": median([g["rps"] for g in got["batched"]]),
        "errors": {k: sum(len(g["errors"]) for g in v) for k, v in got.items()},
        "mean_batch": (after.get("requests", 0) - before.get("requests", 0)) / batches if batches else math.nan,
    }
    row["x_batching"] = row["batched_rps"] / row["unbatched_rps"]
    return row


def batcher_stats(server: Server) -> dict:
    """The batcher's counters from our /healthz (batches and requests so far), for the mean batch size."""
    try:
        return httpx.get(server.url + "/healthz", timeout=10).json().get("batching", {})
    except (httpx.HTTPError, ValueError):
        return {}
