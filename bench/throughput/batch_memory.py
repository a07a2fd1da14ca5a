"""run-batch on a large input: the first answers come within seconds and memory stays flat (nothing reads the whole
file first), beside the same command on a ten-line file.

    .venv/bin/python bench/throughput/batch_memory.py [--model demo] [--gb 1.0] [--seconds 120]

Writes an OpenAI batch file of ~`--gb` GB (System One lines: a ~60-token state, three questions), starts
`python -m blink run-batch -i FILE` on it, samples the process's RSS every 0.2 s for `--seconds`, notes when the first
part file (the first chunk's answers) appears, then stops it with SIGTERM (it finishes its running chunks: the exit
status and the time it took are reported too). The baseline is the same command on a ten-line file: its peak RSS is
the model and the machinery; the large file's peak minus it is what the input's size costs.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: offline.py and the shared modules
import offline  # noqa: F401 - first: the repository importable, the Hub off

# isort: split

import orjson
import psutil
import workload
from servers import DEMO_ROOT

from helpers import server_env


def write_requests(path: Path, gb: float, tokenizer) -> int:
    """Lines until the file holds `gb` GB: 64 distinct states cycled, each line its own custom_id."""
    states = [workload.text_of_tokens(tokenizer, 60, seed=i) for i in range(64)]
    questions = workload.questions(3)
    target, n = int(gb * 1e9), 0
    with open(path, "wb", buffering=1 << 22) as fh:
        while fh.tell() < target:
            body = {"model": "m", "state": f"{n}: {states[n % 64]}", "questions": questions}
            fh.write(orjson.dumps({"custom_id": f"row-{n}", "method": "POST", "url": "/v1/systemone", "body": body}))
            fh.write(b"\n")
            n += 1
    return n


def watched(model: str, source: Path, out: Path, seconds: float) -> dict:
    argv = [sys.executable, "-m", "blink", "run-batch", "--model", model, "-i", str(source), "-o", str(out), "--quiet"]
    started = time.perf_counter()
    proc = subprocess.Popen(argv, env=server_env(DEMO_ROOT), stderr=subprocess.PIPE, text=True)
    process = psutil.Process(proc.pid)
    parts = Path(str(out) + ".parts")
    peak = first = ready = None
    samples = []
    while proc.poll() is None and time.perf_counter() - started < seconds:
        try:
            rss = process.memory_info().rss
        except psutil.Error:
            break
        peak = max(peak or 0, rss)
        now = time.perf_counter() - started
        if ready is None and parts.is_dir():  # the model is loaded, the run has begun
            ready = now
        if first is None and parts.is_dir() and any(parts.glob("part-*.jsonl")):
            first = now
        samples.append((now, rss))
        time.sleep(0.2)
    stopping = time.perf_counter()
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    written = sum(1 for p in parts.glob("part-*.jsonl")) if parts.is_dir() else None
    return {
        "peak_rss_mb": (peak or 0) / 1e6,
        "run_began_s": ready,
        "first_answers_s": first,
        "first_answers_after_run_began_s": None if first is None or ready is None else first - ready,
        "exit": proc.returncode,
        "stop_took_s": time.perf_counter() - stopping,
        "parts_written": written,
        "rss_mb_at": {f"{t:.0f}s": round(r / 1e6) for t, r in samples[:: max(1, len(samples) // 12)]},
        "stderr_tail": err[-300:],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="demo")
    parser.add_argument("--gb", type=float, default=1.0)
    parser.add_argument("--seconds", type=float, default=120)
    args = parser.parse_args()
    from blink.model.demo import demo_model_dir
    from blink.model.loading import load

    model = str(demo_model_dir(args.model)) if args.model in ("demo", "large") else args.model
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        t = time.perf_counter()
        lines = write_requests(folder / "big.jsonl", args.gb, load(model, weights=False).tokenizer)
        size = os.path.getsize(folder / "big.jsonl")
        print(f"input: {lines} lines, {size / 1e9:.2f} GB, written in {time.perf_counter() - t:.0f} s", flush=True)
        with open(folder / "big.jsonl", "rb") as src, open(folder / "small.jsonl", "wb") as dst:
            dst.writelines(src.readline() for _ in range(10))
        small = watched(model, folder / "small.jsonl", folder / "small-out.jsonl", 600)
        print(f"ten lines: {json.dumps(small)}; load {os.getloadavg()}", flush=True)
        big = watched(model, folder / "big.jsonl", folder / "big-out.jsonl", args.seconds)
        print(f"{size / 1e9:.2f} GB: {json.dumps(big)}; load {os.getloadavg()}", flush=True)
    extra = big["peak_rss_mb"] - small["peak_rss_mb"]
    print("| input | peak RSS | first answers after the run began | stopped by SIGTERM |")
    print("|---|---|---|---|")
    print(f"| 10 lines | {small['peak_rss_mb']:.0f} MB | (finished: exit {small['exit']}) | — |")
    print(
        f"| {size / 1e9:.2f} GB | {big['peak_rss_mb']:.0f} MB (+{extra:.0f} MB) | "
        f"{big['first_answers_after_run_began_s']:.1f} s | exit {big['exit']} in {big['stop_took_s']:.1f} s |"
    )


if __name__ == "__main__":
    main()
