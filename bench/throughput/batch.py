"""run-batch against the compute floor and against a client loop over HTTP, the same rows, in one run.

    .venv/bin/python bench/throughput/batch.py [--model large] [--rows 2000] [--state-tokens 60] [--clients 64]
        [--reps 3] [--skip-loop] [--variant "--max-batch-requests 16" ...]

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

How the floor is measured: a sweep of the batch sizes picks the best (a few passes each), then the floor is measured
again at that batch over `FLOOR_ROWS` rows just before and just after each run-batch run (after only, for the
first), `--reps` times: each ratio is of run-batch and the floor around it. Taking the best of the sweep's own short,
noisy figures would bias the floor up (the largest of four noisy estimates), and one floor measured minutes away from
run-batch reads the machine's drift (the same pass varies by up to 30 % between minutes on this shared machine).

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
FLOOR_ROWS = 256  # rows the floor runs before and after each run-batch run (~10-15 s each on the large model)


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


class FloorSide:
    """The decoder alone over rows of the mean length: a sweep to pick the batch, then measurements at it."""

    def __init__(self, model: str, tokens_per_row: float):
        from blink.model.loading import load

        self.floor = Floor(load(model), list(range(1000, 3000)))
        self.length = max(1, round(tokens_per_row))

    def sweep(self, reps: int = 3) -> dict:
        """Rows/s by batch size (a warm-up pass, then the median of `reps` passes each): which batch is best."""
        rates = {}
        for batch in BATCHES:
            self.floor.rows(batch, self.length, batch)
            times = [self.floor.rows(batch, self.length, batch) for _ in range(reps)]
            rates[batch] = batch / statistics.median(times)
        self.batch = max(rates, key=rates.get)
        return rates

    def measure(self) -> float:
        """Seconds for FLOOR_ROWS rows at the batch the sweep picked."""
        return self.floor.rows(FLOOR_ROWS, self.length, self.batch)

    def rows_per_s(self, before: float | None, after: float) -> float:
        """The floor over the measurements either side of a run (the first run has only the one after it)."""
        times = [t for t in (before, after) if t is not None]
        return FLOOR_ROWS * len(times) / sum(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="large", help="demo, large (built on first use), or a model folder")
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--state-tokens", type=int, default=60)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--reps", type=int, default=3, help="run-batch runs, each with the floor measured beside it")
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
        reps, floor = [], None
        for rep in range(args.reps):
            before = floor.measure() if floor else None
            sides = {"run-batch": run_batch(model, table, asked, folder)}
            sides |= {f"run-batch {flags}": run_batch(model, table, asked, folder, flags) for flags in args.variant}
            if floor is None:
                tokens_per_row = sides["run-batch"]["input_tokens"] / sides["run-batch"]["rows"]
                floor = FloorSide(model, tokens_per_row)
                by_batch = ", ".join(f"{b}: {r:.1f}" for b, r in floor.sweep().items())
                print(f"floor sweep ({floor.length} tokens a row), rows/s by batch: {by_batch}; best {floor.batch}")
            rates = {name: summary["rows_per_s"] for name, summary in sides.items()}
            rates["floor"] = floor.rows_per_s(before, floor.measure())
            reps.append(rates)
            shown = ", ".join(f"{name} {rate:.2f}" for name, rate in rates.items())
            print(
                f"rep {rep + 1}: {shown} rows/s; run-batch ÷ floor {rates['run-batch'] / rates['floor']:.3f}x; "
                f"load {load_average()}"
            )
        loop = None if args.skip_loop else client_loop(model, table, questions, args.clients, folder)
        if loop:
            print(f"client loop: {loop['rows_per_s']:.2f} rows/s, {len(loop['errors'])} errors; load {load_average()}")
    report(reps, floor, loop, args.clients)
    print(f"torch threads {torch.get_num_threads()}, cores {os.cpu_count()}")


def report(reps: list[dict], floor: FloorSide, loop: dict | None, clients: int) -> None:
    """Per side: the median rows/s over the reps, and the median of its per-rep ratios to the floor beside it."""
    median_floor = statistics.median(r["floor"] for r in reps)
    print(f"| side | rows/s (median of {len(reps)}) | ÷ floor (median of the per-rep ratios) | per-rep ratios |")
    print("|---|---|---|---|")
    side = f"floor (decoder alone, batch {floor.batch}, {FLOOR_ROWS} rows before and after each run)"
    print(f"| {side} | {median_floor:.2f} | 1.00x | |")
    for name in [n for n in reps[0] if n != "floor"]:
        ratios = [r[name] / r["floor"] for r in reps]
        each = " / ".join(f"{x:.3f}" for x in ratios)
        rate = statistics.median(r[name] for r in reps)
        print(f"| {name} | {rate:.2f} | {statistics.median(ratios):.3f}x | {each} |")
    if loop:
        rate = loop["rows_per_s"]
        run_batch = statistics.median(r["run-batch"] for r in reps)
        print(
            f"| client loop ({clients} connections, serve --batch-window-ms 10) | {rate:.2f} | "
            f"{rate / median_floor:.2f}x (÷ the median floor) | |"
        )
        print(f"run-batch ÷ client loop: {run_batch / rate:.2f}x; load {load_average()}")


if __name__ == "__main__":
    main()
