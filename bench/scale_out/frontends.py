"""Many front ends, one routing: two `python -m blink serve --engine vllm` processes in front of the same N scripted
replicas, their clients' throughput summed, against N x one replica behind one front end.

    .venv/bin/python bench/scale_out/frontends.py [--replicas 4] [--fronts 2] [--delay-ms 100] [--clients 16]
        [--seconds 8]

The scripted replicas (ci/tests/scripted_vllm.py) answer one request at a time after `--delay-ms`, so N of them can
answer at most N / delay requests per second. `--clients` closed-loop clients (split evenly over the front ends)
send distinct decisions for `--seconds`. Each front end routes by the same rendezvous hashing, so a state goes to
the same replica whichever front end it comes through; each counts only its own requests in flight, so each spills
on its own. The row to beat: the sum over the front ends >= 0.8 x N x one replica's requests/s (measured first,
one front end and one replica). Loopback only; every loop bounded in time and count.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: offline.py and the shared modules
from offline import ROOT  # first: the repository importable, the Hub off

# isort: split

from replicas_sim import OUT, load, log, scale_row, start_blink, start_replicas

from helpers import stop_group


def fronts_row(args) -> dict:
    replicas = start_replicas(args.replicas, args.delay_ms)
    fronts = []
    try:
        for _ in range(args.fronts):
            fronts.append(start_blink([u for u, _ in replicas], ROOT, args.timeout_s))
        per_front = max(1, args.clients // args.fronts)

        async def together(seconds: float) -> list[dict]:
            return await asyncio.gather(*(load(url, per_front, seconds) for url, _ in fronts))

        asyncio.run(together(1.5))  # warm-up: replicas described, speeds measured
        runs = asyncio.run(together(args.seconds))
    finally:
        for _, proc in fronts:
            stop_group(proc)
        for _, proc in replicas:
            stop_group(proc)
    started, ended = min(r["started"] for r in runs), max(r["ended"] for r in runs)
    per = [len(r["answered"]) / (r["ended"] - r["started"]) for r in runs]
    return {
        "rps": sum(len(r["answered"]) for r in runs) / (ended - started),
        "per_front": per,
        "lost": sum(len(r["lost"]) for r in runs),
        "sent": sum(r["sent"] for r in runs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--fronts", type=int, default=2)
    parser.add_argument("--delay-ms", type=float, default=100.0)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--timeout-s", type=float, default=300.0, help="blink's --engine-timeout-s (the cap)")
    args = parser.parse_args()
    args.code = ROOT
    OUT.mkdir(parents=True, exist_ok=True)
    log("one replica, one front end")
    one = scale_row(1, args)["rps"]
    log(f"  -> {one:.2f}/s; {args.replicas} replicas, {args.fronts} front ends")
    t = time.perf_counter()
    row = fronts_row(args)
    log(f"  -> {row} ({time.perf_counter() - t:.0f} s)")
    ratio = row["rps"] / (args.replicas * one)
    print(
        f"\n{args.clients} clients over {args.fronts} front ends; each replica one request at a time after "
        f"{args.delay_ms} ms; one replica behind one front end: {one:.1f} requests/s\n"
    )
    print("| front ends | replicas | requests/s (sum) | per front end | / (N x one) | lost |")
    print("|---|---|---|---|---|---|")
    per = " / ".join(f"{x:.1f}" for x in row["per_front"])
    print(f"| {args.fronts} | {args.replicas} | {row['rps']:.1f} | {per} | {ratio:.2f} | {row['lost']}/{row['sent']} |")


if __name__ == "__main__":
    main()
