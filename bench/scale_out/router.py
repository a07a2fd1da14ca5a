"""vllm-router beside blink's own dispatch: `python -m blink serve --engine vllm` in front of 1, 2 and 4 scripted
replicas directly (blink's own dispatch), and in front of `vllm-router` 0.1.17 in front of the same replicas (round
robin; power of two from 2 replicas, which it needs; its default cache_aware at 4, for reference); then 4 replicas
with one hung, both ways.

    .venv/bin/python bench/scale_out/router.py [--delay-ms 100] [--clients 16] [--seconds 8] [--replicas 1,2,4]
                                     [--paths blink,rr,p2,cache] [--head-words 600] [--no-hung]

Each scripted replica (ci/tests/scripted_vllm.py) answers one request at a time after `--delay-ms`, so N replicas
answer at most N / delay requests per second. Rows: requests/s of `--clients` closed-loop clients sending distinct
decisions (bench/scale_out/replicas_sim.py's load), over N x one replica behind blink alone, what was lost (non-200 or
transport error) and what each replica served (its own count, after a 1.5 s warm-up). The hung rows, 4 replicas:
`stop`, one stopped (SIGSTOP: connections accepted, nothing answered, `/health` included) for `--hang-s` after a
warm-up (requests/s before and while it hangs); `health`, one that answers `/health` but never a completion, from
the start (clients from the moment blink is up); sent, lost, and the longest time nothing was answered. The router
runs with the flags docs/scale-out.md gives (`--request-timeout-secs 600`, so no chat stream is cut; health checked
every 2 s), and once with `--request-timeout-secs 5` (it retries a hung call elsewhere, but would cut any stream
longer than 5 s). blink runs with its defaults. vllm-router comes from .venv-router (ci/router-venv.sh builds it
when missing). `--head-words N` starts every state with the same N-word preamble (a long shared head: where
cache_aware sends everything to one replica); `--paths` picks the rows. Loopback only; every loop bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: offline.py and the shared modules
from offline import ROOT  # first: the repository importable, the Hub off

# isort: split

import httpx
import replicas_sim
from replicas_sim import OUT, load, log, longest_gap, rps, start_blink, start_replicas, stop_for

from helpers import start_scripted, stop_group
from helpers.vllm import router_running

# docs/scale-out.md's flags for vllm-router in front of vLLM with blink in front of it
HEALTH = ["--health-check-interval-secs", "2", "--health-failure-threshold", "2", "--health-check-timeout-secs", "2"]
PATHS = {
    "blink": ("blink", None),
    "rr": ("router round_robin", ["--policy", "round_robin", "--request-timeout-secs", "600", *HEALTH]),
    "p2": ("router power_of_two", ["--policy", "power_of_two", "--request-timeout-secs", "600", *HEALTH]),
    "cache": ("router cache_aware (default)", ["--request-timeout-secs", "600", *HEALTH]),
}
HUNG = {
    "blink": None,
    "router round_robin": PATHS["rr"][1],
    "router round_robin, timeout 5 s": ["--policy", "round_robin", "--request-timeout-secs", "5", *HEALTH],
}


def shared_head(words: int) -> None:
    """Every state starts with the same `words`-word preamble (a policy text, as deployments prepend one), then its
    own ticket: replicas_sim's load sends `replicas_sim.body(i)`."""
    head = " ".join(f"rule{k % 97}" for k in range(words))
    own = replicas_sim.body
    replicas_sim.body = lambda i: {**own(i), "state": f"{head}\n{own(i)['state']}"}


def served(replicas) -> list[int]:
    return [httpx.get(url + "/script", timeout=10).json()["served"] for url, _ in replicas]


def front(replicas, flags, stack: ExitStack) -> list[str]:
    """The URLs blink is given: the replicas themselves, or one vllm-router in front of them."""
    urls = [url for url, _ in replicas]
    if flags is None:
        return urls
    return [stack.enter_context(router_running(urls, *flags, log_dir=OUT))]


def scale_row(n: int, name: str, flags, args) -> dict:
    replicas = start_replicas(n, args.delay_ms)
    try:
        with ExitStack() as stack:
            url, proc = start_blink(front(replicas, flags, stack), ROOT, args.timeout_s)
            stack.callback(stop_group, proc)
            asyncio.run(load(url, args.clients, 1.5))  # warm-up: replicas described, speeds measured
            before = served(replicas)
            run = asyncio.run(load(url, args.clients, args.seconds))
            counts = [b - a for a, b in zip(before, served(replicas))]
    finally:
        for _, p in replicas:
            stop_group(p)
    rate = len(run["answered"]) / (run["ended"] - run["started"])
    return {"path": name, "replicas": n, "rps": rate, "lost": len(run["lost"]), "sent": run["sent"], "served": counts}


def start_with_one_hung(delay_ms: float) -> list[tuple[str, object]]:
    """4 scripted replicas, the first hung from the start: it answers `/health`, never a completion."""
    return [start_scripted("hung", "--hang", log_dir=OUT), *start_replicas(3, delay_ms)]


def hung_row(name: str, flags, args, kind: str) -> dict:
    """`kind` stop: one of 4 stopped (SIGSTOP) for `--hang-s` after a warm-up; health: one of 4 hung from the start
    (`/health` 200, no completion ever), clients from the moment blink is up."""
    replicas = start_with_one_hung(args.delay_ms) if kind == "health" else start_replicas(4, args.delay_ms)
    victim = replicas[0][1]
    marks = {}

    async def events(started: float) -> None:
        if kind == "health":
            marks["hang"] = started
            await asyncio.sleep(args.before_s + args.hang_s + args.after_s)
            marks["resume"] = time.perf_counter()
            return
        await stop_for(victim.pid, args, marks)

    try:
        with ExitStack() as stack:
            url, proc = start_blink(front(replicas, flags, stack), ROOT, args.timeout_s)
            stack.callback(stop_group, proc)
            if kind == "stop":
                asyncio.run(load(url, args.clients, 1.5))
            try:
                run = asyncio.run(load(url, args.clients, args.before_s + args.hang_s + args.after_s, events))
            finally:
                os.kill(victim.pid, signal.SIGCONT)
    finally:
        for _, p in replicas:
            stop_group(p)
    during = rps(run["answered"], marks["hang"], marks["resume"])
    return {
        "path": name,
        "kind": kind,
        "sent": run["sent"],
        "lost": len(run["lost"]),
        "lost_kinds": sorted(set(run["lost"])),
        "rps_before": rps(run["answered"], run["started"] + 0.5, marks["hang"]) if kind == "stop" else None,
        "rps_during": during,
        "silence_s": longest_gap(run["answered"], marks["hang"], marks["resume"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--delay-ms", type=float, default=100.0)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--replicas", default="1,2,4")
    parser.add_argument("--before-s", type=float, default=3.0)
    parser.add_argument("--hang-s", type=float, default=12.0)
    parser.add_argument("--after-s", type=float, default=3.0)
    parser.add_argument("--timeout-s", type=float, default=300.0, help="blink's --engine-timeout-s (the cap)")
    parser.add_argument("--no-hung", action="store_true")
    parser.add_argument("--paths", default="blink,rr,p2,cache", help="of blink, rr, p2, cache")
    parser.add_argument("--head-words", type=int, default=0, help="a preamble of this many words shared by every state")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    rows = []
    if args.head_words:
        shared_head(args.head_words)
    for n in [int(x) for x in args.replicas.split(",")]:
        for key in args.paths.split(","):
            name, flags = PATHS[key]
            if (n < 2 and key in ("p2", "cache")) or (n < 4 and key == "cache"):
                continue  # power of two needs two workers; cache_aware's one-replica pile-up shows at 4
            log(f"{n} replica(s), {name}")
            rows.append(scale_row(n, name, flags, args))
            log(f"  -> {rows[-1]}")
    one = next((r["rps"] for r in rows if r["replicas"] == 1 and r["path"] == "blink"), None)
    head = f"; every state behind a {args.head_words}-word shared preamble" if args.head_words else ""
    print(f"\n{args.clients} clients; each replica one request at a time after {args.delay_ms} ms{head}\n")
    print("| path | replicas | requests/s | / (N x one) | lost | served per replica |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        ratio = f"{r['rps'] / (r['replicas'] * one):.2f}" if one else ""
        print(f"| {r['path']} | {r['replicas']} | {r['rps']:.1f} | {ratio} | {r['lost']}/{r['sent']} | {r['served']} |")
    if args.no_hung:
        return
    hung = []
    for kind in ("stop", "health"):
        for name, flags in HUNG.items():
            log(f"4 replicas, one hung ({kind}): {name}")
            hung.append(hung_row(name, flags, args, kind))
            log(f"  -> {hung[-1]}")
    print(
        f"\none of 4 hung: stop = stopped (SIGSTOP, `/health` too) for {args.hang_s:.0f} s after a warm-up; health = "
        f"`/health` 200 but no completion, from the start ({args.before_s + args.hang_s + args.after_s:.0f} s of "
        "clients from the moment blink is up)\n"
    )
    print("| hung | path | sent | lost | requests/s (before ->) while hung | longest time nothing answered |")
    print("|---|---|---|---|---|---|")
    for h in hung:
        lost = f"{h['lost']} {' '.join(h['lost_kinds'])}".strip()
        before = f"{h['rps_before']:.1f} -> " if h["rps_before"] is not None else ""
        print(
            f"| {h['kind']} | {h['path']} | {h['sent']} | {lost} | {before}{h['rps_during']:.1f} | "
            f"{h['silence_s']:.2f} s |"
        )


if __name__ == "__main__":
    main()
