"""Side-by-side benchmark: our server vs `transformers serve` vs a plain per-question forward, one table.

    .venv/bin/python bench/latency/run.py [--quick] [--model demo|large|demo,large|PATH] [--json out.json]

Every row is measured in this one run, both (all three) sides on the same model and the same request bodies,
alternating between the sides rep by rep so they share the machine's noise; cells are medians. Ratios are
written so that > 1 means we are better. See bench/README.md for what each row means and the targets.

Sides:
  ours    `python -m blink serve --model M` over HTTP (batching off for the latency rows)
  TS      `transformers serve M` over HTTP, its `/v1/systemone` (DecisionPipeline: one fresh full forward per
          question, `logits_to_keep` at the read positions, no cache reuse)
  plain   in this process: for each question's prompt (the same token ids our server builds), one fresh forward
          with `use_cache=False, logits_to_keep=<read positions>` (`Executor.reference`, which the exactness
          tests compare against too); only the forwards are timed (no tokenizing,
          no HTTP): the model cost a server without prefix sharing cannot go below.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: offline.py and the shared modules
import offline  # noqa: F401 - first: the repository importable, the Hub off

# isort: split

import psutil
import workload
from honesty import duration_honesty
from run_latency import Sides, bf16_drift, measure_cell, mixed_batch
from run_table import table
from run_throughput import measure_throughput
from servers import Server, blink_serve, closed_loop

# (state tokens, questions): the performance issue's grid, plus the engine issue's 1,000-token state at 1/4/16
FULL_GRID = [
    (64, 1),
    (64, 6),
    (64, 16),
    (64, 64),
    (512, 1),
    (512, 6),
    (512, 16),
    (512, 64),
    (1000, 1),
    (1000, 4),
    (1000, 16),
    (2200, 1),
    (2200, 6),
    (2200, 16),
    (2200, 64),
]
QUICK_GRID = [(64, 1), (64, 16), (1000, 1), (1000, 16)]
FULL_CLIENTS = {1: 8, 16: 3, 64: 2}  # concurrent clients -> requests each (closed loop)
QUICK_CLIENTS = {1: 3, 16: 2}


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# one model -----------------------------------------------------------------------------------------------
def resolve_model(spec: str) -> tuple[str, Path]:
    if spec in ("demo", "large"):
        from blink.model.demo import SHAPES, demo_model_dir, make_demo_model

        path = demo_model_dir(spec)
        config = json.loads((path / "config.json").read_text())
        if any(config.get(k) != v for k, v in SHAPES[spec].items() if k != "mrope_section"):
            log(f"{path} was built with another {spec!r} shape: rebuilding it")  # the cache keys on the name only
            make_demo_model(path, spec)
        return spec, path
    return Path(spec).name, Path(spec)


def bench_model(spec: str, quick: bool, window_ms: float, logdir: Path) -> dict:
    label, path = resolve_model(spec)
    ts_bin = str(Path(sys.executable).parent / "transformers")
    common = blink_serve(
        "--host", "127.0.0.1", "--log-level", "warning", "--max-queued-requests", "512", model=str(path)
    )
    log(f"{label}: starting servers ({path})")
    servers = {
        "ours": Server(f"{label}-ours", common + ["--batch-window-ms", "0"], logdir),
        "batched": Server(
            f"{label}-ours-batched",
            common + ["--batch-window-ms", str(window_ms), "--max-batch-requests", "64"],
            logdir,
        ),
        "ts": Server(
            f"{label}-transformers-serve",
            [ts_bin, "serve", str(path), "--host", "127.0.0.1", "--port", "{port}", "--device", "cpu"]
            + ["--log-level", "error"],
            logdir,
            health="/health",
        ),
    }
    try:
        from blink.decide.planner import Engine
        from blink.model.loading import load

        engine = Engine(load(str(path)))  # the plain side's model, in this process (fp32 CPU, like the servers)
        params = sum(p.numel() for p in engine.loaded.model.parameters())
        for s in servers.values():
            s.wait_ready()
        log(f"{label}: servers ready ({params / 1e6:.0f}M params); warming up")
        sides = Sides(engine, servers["ours"], servers["ts"])
        model_name = str(path)  # transformers serve (pinned to this model) insists on it; ours accepts any name
        warm = workload.body(engine.tokenizer, model_name, 200, 3, seed=1)
        for _ in range(2):
            sides.ours(warm), sides.ts(warm), sides.plain(warm)
        asyncio.run(closed_loop(servers["batched"].url, [[warm]] * 4))

        grid = QUICK_GRID if quick else FULL_GRID
        budget = 4.0 if quick else (6.0 if label == "demo" else 10.0)
        cells = []
        for state, n_q in grid:
            cell = measure_cell(sides, engine.tokenizer, model_name, state, n_q, budget, max_reps=3 if quick else 7)
            cells.append(cell)
            log(
                f"{label}: {state:>5} tok x {n_q:>2} q: ours {cell['ours_ms']:.1f} ms, TS {cell['ts_ms']:.1f} ms "
                f"(x{cell['x_ts']:.2f}), plain {cell['plain_ms']:.1f} ms (x{cell['x_plain']:.2f}), "
                f"outside {cell['outside_share']:.1%} (prepare {cell['prepare_share']:.1%}), n={cell['n']}"
            )
        throughput = []
        for clients, each in (QUICK_CLIENTS if quick else FULL_CLIENTS).items():
            row = measure_throughput(servers["ours"], servers["batched"], engine.tokenizer, model_name, clients, each)
            throughput.append(row)
            log(
                f"{label}: {clients} clients: unbatched {row['unbatched_rps']:.1f} req/s, batched "
                f"{row['batched_rps']:.1f} req/s (x{row['x_batching']:.2f}), mean batch {row['mean_batch']:.1f}, "
                f"errors {row['errors']}"
            )
        calls = [c for cell in cells for c in cell.pop("calls")]
        bench_rss = psutil.Process().memory_info().rss
    finally:
        for s in servers.values():
            s.stop()
    log(f"{label}: bf16 drift against the fp32 plain forward; a lopsided batch")
    drift = bf16_drift(sides, model_name, quick)
    lopsided = mixed_batch(sides.engine, model_name)
    return {
        "model": label,
        "path": str(path),
        "params": params,
        "cells": cells,
        "throughput": throughput,
        "memory": {name: {"ready_rss": s.ready_rss, "peak_rss": s.peak_rss} for name, s in servers.items()}
        | {"bench_process_rss": bench_rss},
        "durations": duration_honesty(calls),
        "bf16": drift,
        "mixed_batch": lopsided,
        "batch_window_ms": window_ms,
        "restarts": [why for s in servers.values() for why in s.restarts],
    }


def machine() -> dict:
    cpu = "unknown"
    try:
        for text in Path("/proc/cpuinfo").read_text().splitlines():
            if text.startswith("model name"):
                cpu = text.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import torch
    import transformers

    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "loadavg_start": os.getloadavg(),
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a smoke run: 4 latency cells, 1 and 16 clients, few reps")
    ap.add_argument(
        "--model",
        default=None,
        help="demo, large, a model folder, or a comma list (default: demo,large; --quick: demo)",
    )
    ap.add_argument("--batch-window-ms", type=float, default=10.0, help="the batched server's window (default 10)")
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (OMP_NUM_THREADS) of every side (default 1; 0 = torch's default). On a "
        "shared 2-core machine 2 threads made a forward 3x slower and far noisier under load",
    )
    ap.add_argument("--json", help="also write the raw results here")
    args = ap.parse_args(argv)
    if args.threads:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)  # servers inherit it; this process sets it below
        import torch

        torch.set_num_threads(args.threads)
    specs = (args.model or ("demo" if args.quick else "demo,large")).split(",")
    logdir = Path(tempfile.mkdtemp(prefix="blink-bench-"))
    started = time.time()
    info = machine()
    log(f"logs in {logdir}; machine {info['nproc']} CPUs ({info['cpu']}), load {info['loadavg_start']}")
    results = [bench_model(spec, args.quick, args.batch_window_ms, logdir) for spec in specs]
    info["loadavg_end"] = os.getloadavg()
    info["wall_s"] = round(time.time() - started, 1)
    info["date"] = dt.datetime.now().astimezone().isoformat(timespec="seconds")
    larger = max(results, key=lambda r: r["params"])["model"] if len(results) > 1 else results[0]["model"]
    print(
        f"\nblink bench — {info['date']} — {'quick' if args.quick else 'full'} run, {info['wall_s']} s — "
        f"{info['nproc']} × {info['cpu']} (torch {info['torch']} {info['torch_threads']} threads, transformers "
        f"{info['transformers']}) — load avg {info['loadavg_start'][0]:.2f} → {info['loadavg_end'][0]:.2f}"
    )
    print(
        "models: "
        + "; ".join(f"{r['model']} = {r['params'] / 1e6:.0f}M params ({r['path']})" for r in results)
        + f"; batched server: --batch-window-ms {args.batch_window_ms:g} --max-batch-requests 64"
    )
    print(table(results, larger))
    for r in results:
        for why in r["restarts"]:
            print(f"note: {r['model']}: {why} (restarted; the request was sent again)")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": info, "results": results}, indent=1, default=str))


if __name__ == "__main__":
    main()
