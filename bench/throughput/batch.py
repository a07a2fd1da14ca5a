"""run-batch against the compute floor and against a client loop over HTTP, the same rows, in one run.

    .venv/bin/python bench/throughput/batch.py [--model large] [--rows 2000] [--state-tokens 60] [--clients 64]
        [--skip-loop] [--variant "--max-batch-requests 16" ...]

The rows: `--rows` support-ticket states of ~`--state-tokens` tokens, each asked the same three questions (noul,
choice of 4, score of 3-5; bench/workload.py), as a JSONL table. Three sides:

- **run-batch**: `python -m blink run-batch --table ...` as its users run it (its defaults); rows/s over the run,
  model loading excluded (the summary it writes in `OUT.blink.json`); each `--variant` runs it again with those
  flags, a row of the table each (a sweep of its knobs on the same rows);
- **client loop**: `python -m blink serve --batch-window-ms 10` on the same model, `--clients` connections each
  sending its share of the rows as `/v1/systemone` requests one after another (what a user writes by hand today);
- **floor**: the decoder alone (no LM head, no cache kept) over the same tokens (the rows' `usage.input_tokens`,
  state counted once), as batches of equal sequences of the rows' mean length, at the best of batch sizes
  1 / 4 / 16 / 64: what the tokens cost at the decoder's best batch.

Every side uses the machine's cores as torch sets them (run-batch and serve run as their users run them). The load
average is printed before and after: these machines are shared, read the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: offline.py and the shared modules
import offline  # noqa: F401 - first: the repository importable, the Hub off

# isort: split

import torch
import workload
from latency.floor import Floor, load_average
from servers import DEMO_ROOT, Server, blink_serve, closed_loop

from helpers import server_env

BATCHES = (1, 4, 16, 64)


def write_table(tokenizer, folder: Path, rows: int, state_tokens: int) -> tuple[Path, Path, dict]:
    questions = workload.questions(3)
    table, asked = folder / "rows.jsonl", folder / "questions.json"
    with open(table, "w", encoding="utf-8") as fh:
        for i in range(rows):
            fh.write(json.dumps({"row": i, "text": workload.text_of_tokens(tokenizer, state_tokens, seed=i)}) + "\n")
    asked.write_text(json.dumps(questions), encoding="utf-8")
    return table, asked, questions


def run_batch(model: str, table: Path, asked: Path, folder: Path, flags: str = "") -> dict:
    out = folder / "out.jsonl"
    argv = [sys.executable, "-m", "blink", "run-batch", "--model", model, "--table", str(table)]
    argv += ["--state-column", "text", "--questions", str(asked), "-o", str(out), "--quiet", "--overwrite"]
    argv += shlex.split(flags)
    done = subprocess.run(argv, capture_output=True, text=True, env=server_env(DEMO_ROOT))
    if done.returncode:
        raise SystemExit(f"run-batch failed:\n{done.stderr[-3000:]}")
    return json.loads(Path(str(out) + ".blink.json").read_text())["summary"]


def client_loop(model: str, table: Path, questions: dict, clients: int, logdir: Path) -> dict:
    rows = [json.loads(line)["text"] for line in table.read_text(encoding="utf-8").splitlines()]
    bodies = [[{"model": "m", "state": s, "questions": questions} for s in rows[k::clients]] for k in range(clients)]
    server = Server("serve-batched", blink_serve("--batch-window-ms", "10", model=model), logdir).wait_ready()
    try:
        result = asyncio.run(closed_loop(server.url, bodies))
    finally:
        server.stop()
    result["rows_per_s"] = result.pop("rps")
    return result


def floor_rows_per_s(model: str, tokens_per_row: float, reps: int = 5) -> dict:
    """Rows/s of the decoder alone over rows of the mean length, at the best batch size (a warm-up pass first)."""
    from blink.model.loading import load

    loaded = load(model)
    floor = Floor(loaded, list(range(1000, 3000)))
    length = max(1, round(tokens_per_row))
    rates = {}
    for batch in BATCHES:
        floor.rows(batch, length, batch)
        times = [floor.rows(batch, length, batch) for _ in range(reps)]
        rates[batch] = batch / statistics.median(times)
    best = max(rates, key=rates.get)
    return {"rows_per_s": rates[best], "best_batch": best, "by_batch": rates, "tokens_per_row": length}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="large", help="demo, large (built on first use), or a model folder")
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--state-tokens", type=int, default=60)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--skip-loop", action="store_true", help="leave out the client loop over HTTP")
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        help='run-batch again with these flags, e.g. "--max-batch-requests 16" (repeatable: a row each)',
    )
    args = parser.parse_args()
    from blink.model.demo import demo_model_dir
    from blink.model.loading import load

    model = str(demo_model_dir(args.model)) if args.model in ("demo", "large") else args.model
    print(f"model {model}; {args.rows} rows of ~{args.state_tokens} tokens x 3 questions; load {load_average()}")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        table, asked, questions = write_table(
            load(model, weights=False).tokenizer, folder, args.rows, args.state_tokens
        )
        batch = run_batch(model, table, asked, folder)
        tokens_per_row = batch["input_tokens"] / batch["rows"]
        print(f"run-batch: {batch['rows_per_s']:.2f} rows/s ({tokens_per_row:.0f} tokens a row); load {load_average()}")
        variants = {flags: run_batch(model, table, asked, folder, flags)["rows_per_s"] for flags in args.variant}
        for flags, rate in variants.items():
            print(f"run-batch {flags}: {rate:.2f} rows/s; load {load_average()}")
        loop = None if args.skip_loop else client_loop(model, table, questions, args.clients, folder)
        if loop:
            print(f"client loop: {loop['rows_per_s']:.2f} rows/s, {len(loop['errors'])} errors; load {load_average()}")
        floor = floor_rows_per_s(model, tokens_per_row)
    by_batch = ", ".join(f"{b}: {r:.1f}" for b, r in floor["by_batch"].items())
    print(f"floor: {floor['rows_per_s']:.2f} rows/s at batch {floor['best_batch']} (rows/s by batch: {by_batch})")
    print("| side | rows/s | ÷ floor |")
    print("|---|---|---|")
    sides = [("floor (decoder alone, best batch)", floor["rows_per_s"]), ("run-batch", batch["rows_per_s"])]
    sides += [(f"run-batch {flags}", rate) for flags, rate in variants.items()]
    if loop:
        sides.append((f"client loop ({args.clients} connections, serve --batch-window-ms 10)", loop["rows_per_s"]))
    for name, rate in sides:
        print(f"| {name} | {rate:.2f} | {rate / floor['rows_per_s']:.2f}x |")
    if loop:
        print(f"run-batch ÷ client loop: {batch['rows_per_s'] / loop['rows_per_s']:.2f}x; load {load_average()}")
    print(f"torch threads {torch.get_num_threads()}, cores {os.cpu_count()}")


if __name__ == "__main__":
    main()
