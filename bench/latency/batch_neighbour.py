"""An interactive decision's latency with a Batch API batch running and without, beside the batch's own pace.

    .venv/bin/python bench/latency/batch_neighbour.py [--model large] [--rows 400] [--call-s 0.01,0.25,1.0]

For each `--batch-call-s` value, one `python -m blink serve` with a key and a data dir (the Batch API on, its
defaults otherwise: no batching window, 16 rows in flight): first `--probes` interactive `/v1/systemone` decisions
one after another on an idle server, then a batch of `--rows` rows (~60-token support tickets, three questions:
bench/workload.py) and, while it runs, the same interactive decision sent again and again until the batch ends.
Printed per value: the interactive latency (p50, p95, max) idle and beside the batch, its wait for the model
(server-timing's `queue`), the batch's rows/s, and its calls (rows per call, the longest call). The knob bounds
what an interactive decision waits for (the bulk call already running); a value near 0 is one row per call, as
the Batch API ran before bulk rows had calls of their own. The load average is printed: read the ratios.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: offline.py and the shared modules
import offline  # noqa: F401 - first: the repository importable, the Hub off

# isort: split

import httpx
import openai
import workload
from latency.floor import load_average
from servers import Server, blink_serve

KEY = "bench-key"


def probe(url: str, body: dict) -> tuple[float, float]:
    """One interactive decision: (seconds it took, seconds it waited for the model)."""
    t = time.perf_counter()
    answer = httpx.post(url + "/v1/systemone", json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=300)
    took = time.perf_counter() - t
    answer.raise_for_status()
    timing = dict(part.split(";dur=") for part in answer.headers["server-timing"].split(", "))
    return took, float(timing.get("queue", 0)) / 1000


def figures(samples: list[tuple[float, float]]) -> dict:
    took = sorted(s[0] for s in samples)
    return {
        "n": len(took),
        "p50_ms": 1000 * statistics.median(took),
        "p95_ms": 1000 * took[min(len(took) - 1, int(0.95 * len(took)))],
        "max_ms": 1000 * took[-1],
        "max_queue_ms": 1000 * max(s[1] for s in samples),
    }


def one_setting(model: str, call_s: float, rows: list[dict], interactive: dict, probes: int, logdir: Path) -> dict:
    data = Path(tempfile.mkdtemp(prefix="batch-neighbour-"))
    flags = ("--api-key", KEY, "--data-dir", str(data), "--batch-call-s", str(call_s))
    server = Server(f"serve-call-{call_s}", blink_serve(*flags, model=model), logdir).wait_ready()
    try:
        for _ in range(3):
            probe(server.url, interactive)  # warm: the first passes pay for allocations
        idle = [probe(server.url, interactive) for _ in range(probes)]
        client = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0)
        lines = "".join(json.dumps(r) + "\n" for r in rows).encode()
        file = client.files.create(file=("rows.jsonl", io.BytesIO(lines)), purpose="batch")
        bulk_before = httpx.get(server.url + "/healthz").json()["batching"]["bulk"]
        t = time.perf_counter()
        batch = client.batches.create(input_file_id=file.id, endpoint="/v1/systemone", completion_window="24h")
        busy = []
        while client.batches.retrieve(batch.id).status in ("validating", "in_progress"):
            busy.append(probe(server.url, interactive))
        wall = time.perf_counter() - t
        done = client.batches.retrieve(batch.id)
        bulk = httpx.get(server.url + "/healthz").json()["batching"]["bulk"]
    finally:
        server.stop()
    calls = bulk["calls"] - bulk_before["calls"]
    return {
        "call_s": call_s,
        "idle": figures(idle),
        "busy": figures(busy) if busy else None,
        "batch": {
            "status": done.status,
            "completed": done.request_counts.completed,
            "failed": done.request_counts.failed,
            "rows_per_s": done.request_counts.completed / wall,
            "calls": calls,
            "rows_per_call": (bulk["rows"] - bulk_before["rows"]) / max(1, calls),
            "longest_call_ms": 1000 * bulk["longest_call_s"],
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="large", help="demo, large (built on first use), or a model folder")
    parser.add_argument("--rows", type=int, default=400)
    parser.add_argument("--state-tokens", type=int, default=60)
    parser.add_argument("--probes", type=int, default=20)
    parser.add_argument("--call-s", default="0.01,0.25,1.0", help="--batch-call-s values, comma-separated")
    args = parser.parse_args()

    from blink.model.demo import demo_model_dir
    from blink.model.loading import load

    if args.model in ("demo", "large"):
        args.model = str(demo_model_dir(args.model))  # built on first use, offline
    tokenizer = load(args.model, weights=False).tokenizer
    questions = workload.questions(3)
    rows = [
        {
            "custom_id": f"row-{i}",
            "method": "POST",
            "url": "/v1/systemone",
            "body": {"model": "m", "state": workload.text_of_tokens(tokenizer, args.state_tokens, seed=i),
                     "questions": questions},
        }
        for i in range(args.rows)
    ]  # fmt: skip
    interactive = {"model": "m", "state": workload.text_of_tokens(tokenizer, args.state_tokens, seed=10**6),
                   "questions": questions}  # fmt: skip
    print(f"load average before: {load_average()}", flush=True)
    logdir = Path(tempfile.mkdtemp(prefix="bench-logs-"))
    results = [
        one_setting(args.model, float(v), rows, interactive, args.probes, logdir) for v in args.call_s.split(",")
    ]
    print(f"load average after: {load_average()}")
    print(f"\n{args.rows} rows x 3 questions, ~{args.state_tokens}-token states, model {args.model}\n")
    head = "| batch_call_s | idle p50 / p95 ms | beside the batch p50 / p95 / max ms | max queue ms | batch rows/s |"
    print(head + " rows per call | longest call ms |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        i, b, batch = r["idle"], r["busy"] or {}, r["batch"]
        busy = f"{b.get('p50_ms', 0):.0f} / {b.get('p95_ms', 0):.0f} / {b.get('max_ms', 0):.0f}"
        print(
            f"| {r['call_s']} | {i['p50_ms']:.0f} / {i['p95_ms']:.0f} | {busy} | {b.get('max_queue_ms', 0):.0f} "
            f"| {batch['rows_per_s']:.2f} | {batch['rows_per_call']:.1f} | {batch['longest_call_ms']:.0f} |"
        )
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
