"""Replica simulation: `python -m blink serve --engine vllm` in front of 1, 2, 4, 8 scripted replicas, then 4 with one
hung, on this machine (no vLLM, no model computed).

    .venv/bin/python bench/scale_out/replicas_sim.py [--delay-ms 100] [--clients 16] [--seconds 8] [--code DIR]

Each scripted replica (ci/tests/scripted_vllm.py) answers one request at a time after `--delay-ms`, so N replicas
can answer at most N / delay requests per second and blink is the only thing that can keep them from it. Rows:
requests/s of `--clients` closed-loop clients sending distinct decisions (so affinity spreads them), and that over
N x one replica's. The hung row: after a warm-up, one of 4 replicas is stopped (SIGSTOP) for `--hang-s`; the row
gives the requests sent, lost (non-200 or transport error), retried (the replicas' timeouts), requests/s while it
hangs over the same replicas' requests/s before it, and the longest time nothing was answered. `--code DIR` runs
blink from another checkout (its `blink` package) so the figures before a change stand beside the ones after.
Loopback only; every loop bounded in time and count.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: offline.py and the shared modules
from offline import ROOT  # first: the repository importable, the Hub off

# isort: split

import httpx
from servers import DEMO_ROOT

from helpers import free_port, launch, server_env, stop_group, wait_healthy

OUT = ROOT / "bench" / "out"
QUESTION = {"type": "noul", "instructions": "Is the parcel late?"}


def log(msg: str) -> None:
    print(f"[replicas-sim {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def start_replicas(n: int, delay_ms: float) -> list[tuple[str, object]]:
    out = []
    for i in range(n):
        port = free_port()
        argv = [sys.executable, str(ROOT / "ci" / "tests" / "scripted_vllm.py"), "--port", str(port)]
        argv += ["--delay-ms", str(delay_ms)]
        out.append((f"http://127.0.0.1:{port}", launch(argv, port, dict(os.environ), OUT / f"scripted-{i}-{port}.log")))
    for url, proc in out:
        wait_healthy(url, proc, OUT / "scripted.log", timeout=30, path="/health")
    return out


def start_blink(urls: list[str], code: Path, timeout_s: float):
    port = free_port()
    argv = [sys.executable, "-m", "blink", "serve", "--model", "demo", "--port", str(port)]
    argv += ["--engine", "vllm", "--engine-url", ",".join(urls), "--engine-timeout-s", str(timeout_s)]
    env = server_env(DEMO_ROOT, {"PYTHONPATH": str(code)})
    log_path = OUT / f"blink-sim-{port}.log"
    proc = launch(argv, port, env, log_path, cwd=code)
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, proc, log_path, timeout=300)
    return url, proc


def body(i: int) -> dict:
    return {
        "state": f"Ticket {i}: parcel {i * 7919 % 10007} has not moved for {i % 13} days.",
        "questions": {"q": QUESTION},
    }


async def load(url: str, clients: int, seconds: float, events=None) -> dict:
    """`clients` closed-loop clients for `seconds`: every answer's time and outcome."""
    answered: list[float] = []
    lost: list[str] = []
    sent = 0
    stop_at = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=clients + 4)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:

        async def one(c: int) -> None:
            nonlocal sent
            k = 0
            while time.perf_counter() < stop_at and k < 100_000:
                i = c * 100_000 + k
                k += 1
                sent += 1
                try:
                    r = await client.post("/v1/systemone", json=body(i))
                    if r.status_code == 200:
                        answered.append(time.perf_counter())
                    else:
                        lost.append(str(r.status_code))
                except httpx.HTTPError as exc:
                    lost.append(type(exc).__name__)

        started = time.perf_counter()
        tasks = [asyncio.create_task(one(c)) for c in range(clients)]
        if events:
            await events(started)
        await asyncio.gather(*tasks)
    return {"started": started, "ended": time.perf_counter(), "answered": answered, "lost": lost, "sent": sent}


def rps(times: list[float], start: float, end: float) -> float:
    return sum(start <= t < end for t in times) / max(1e-9, end - start)


def longest_gap(times: list[float], start: float, end: float) -> float:
    points = [start, *sorted(t for t in times if start <= t < end), end]
    return max(b - a for a, b in zip(points, points[1:]))


def health(url: str) -> dict:
    return httpx.get(url + "/healthz", timeout=30).json()


def scale_row(n: int, args) -> dict:
    replicas = start_replicas(n, args.delay_ms)
    try:
        url, proc = start_blink([u for u, _ in replicas], args.code, args.timeout_s)
        try:
            asyncio.run(load(url, args.clients, 1.5))  # warm-up: replicas described, speeds measured
            run = asyncio.run(load(url, args.clients, args.seconds))
            served = [row["served"] for row in health(url)["vllm"]["replicas"]]
        finally:
            stop_group(proc)
    finally:
        for _, p in replicas:
            stop_group(p)
    rate = len(run["answered"]) / (run["ended"] - run["started"])
    return {"replicas": n, "rps": rate, "lost": len(run["lost"]), "sent": run["sent"], "served": served}


async def stop_for(pid: int, args, marks: dict) -> None:
    """After `--before-s`, the replica `pid` stopped (SIGSTOP) for `--hang-s`, then resumed; `marks` says when."""
    await asyncio.sleep(args.before_s)
    marks["hang"] = time.perf_counter()
    os.kill(pid, signal.SIGSTOP)
    await asyncio.sleep(args.hang_s)
    os.kill(pid, signal.SIGCONT)
    marks["resume"] = time.perf_counter()


def hung_row(args) -> dict:
    replicas = start_replicas(4, args.delay_ms)
    victim = replicas[0][1]
    try:
        url, proc = start_blink([u for u, _ in replicas], args.code, args.timeout_s)
        try:
            asyncio.run(load(url, args.clients, 1.5))
            marks = {}

            async def events(started: float) -> None:
                await stop_for(victim.pid, args, marks)

            try:
                run = asyncio.run(load(url, args.clients, args.before_s + args.hang_s + args.after_s, events))
            finally:
                os.kill(victim.pid, signal.SIGCONT)
            rows = health(url)["vllm"]["replicas"]
        finally:
            stop_group(proc)
    finally:
        for _, p in replicas:
            stop_group(p)
    before = rps(run["answered"], run["started"] + 0.5, marks["hang"])
    during = rps(run["answered"], marks["hang"], marks["resume"])
    return {
        "sent": run["sent"],
        "lost": len(run["lost"]),
        "lost_kinds": sorted(set(run["lost"])),
        "retried": sum(r.get("timeouts", 0) for r in rows),
        "rps_before": before,
        "rps_during": during,
        "held": during / before if before else 0.0,
        "longest_silence_s": longest_gap(run["answered"], marks["hang"], marks["resume"]),
        "served": [r["served"] for r in rows],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--delay-ms", type=float, default=100.0)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--replicas", default="1,2,4,8")
    parser.add_argument("--before-s", type=float, default=3.0)
    parser.add_argument("--hang-s", type=float, default=12.0)
    parser.add_argument("--after-s", type=float, default=3.0)
    parser.add_argument("--timeout-s", type=float, default=300.0, help="blink's --engine-timeout-s (the cap)")
    parser.add_argument("--code", type=Path, default=ROOT, help="the checkout whose blink is measured")
    parser.add_argument("--no-hung", action="store_true")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    rows = []
    for n in [int(x) for x in args.replicas.split(",")]:
        log(f"{n} replica(s)")
        rows.append(scale_row(n, args))
        log(f"  -> {rows[-1]}")
    one = next((r["rps"] for r in rows if r["replicas"] == 1), None)
    print(
        f"\nblink at {args.code}; {args.clients} clients; each replica one request at a time after {args.delay_ms} ms\n"
    )
    print("| replicas | requests/s | / (N x one) | lost | served per replica |")
    print("|---|---|---|---|---|")
    for r in rows:
        ratio = f"{r['rps'] / (r['replicas'] * one):.2f}" if one else ""
        print(f"| {r['replicas']} | {r['rps']:.1f} | {ratio} | {r['lost']}/{r['sent']} | {r['served']} |")
    if not args.no_hung:
        log("4 replicas, one hung")
        h = hung_row(args)
        log(f"  -> {h}")
        print(
            f"\none of 4 hung for {args.hang_s:.0f} s (SIGSTOP): sent {h['sent']}, lost {h['lost']} {h['lost_kinds']}, "
            f"retried {h['retried']}; requests/s {h['rps_before']:.1f} before -> {h['rps_during']:.1f} while hung "
            f"({h['held']:.2f}); longest time nothing was answered {h['longest_silence_s']:.2f} s; "
            f"served per replica {h['served']}"
        )


if __name__ == "__main__":
    main()
