"""Fair admission per caller: a greedy caller and a polite one on the same `python -m blink serve`, one table.

    .venv/bin/python bench/stress/fairness.py [--seconds S] [--greedy N] [--flags "--batch-window-ms 10"] [--space]

Loopback, callers told apart by their source address (the server's caller on `serve` is the peer address): the
greedy caller (127.0.0.2) keeps N decisions in flight (default 96: more than the server's 80 places), sending the
next as soon as one is answered, a refusal (529) retried after a 50 ms pause; the polite caller (127.0.0.3) sends
one decision at a time, the next as soon as the last is answered. Two phases in one run, on one server: the greedy
caller alone for S seconds, then both for S seconds. Printed: the polite caller's median latency and its 529s, the
greedy caller's median latency, and the greedy caller's rate (answered decisions per second) alone and beside the
polite one. The targets (issue 44): the polite caller gets no 529, its median latency is at most half the greedy
caller's, and the greedy caller keeps at least 0.8 of the rate it has alone.

Every request is a one-question decision about a state of its own (no prefix-state cache hit between them).
`--space` measures the Space instead (`python app.py` with the demo model on CPU, as the Space tests start it; its
`/v1/systemone`, its callers told apart the same way: no `X-IP-Token` and nobody signed in, the peer address);
`--flags` are then `BLINK_*` assignments (`"BLINK_MAX_PLACES_PER_CALLER=64"`).
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: offline.py and the shared modules
from offline import ROOT  # first: the repository importable, the Hub off

# isort: split

import httpx
from servers import Server, blink_serve

GREEDY, POLITE = "127.0.0.2", "127.0.0.3"
QUESTION = {"type": "noul", "instructions": "Is this about the weather?"}


def log(msg: str) -> None:
    print(f"[fairness {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def client(url: str, address: str, connections: int) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    transport = httpx.AsyncHTTPTransport(local_address=address, limits=limits)
    return httpx.AsyncClient(base_url=url, transport=transport, timeout=120)


class Tally:
    """One caller's outcomes within a phase."""

    def __init__(self):
        self.latencies: list[float] = []
        self.refused = 0
        self.failed: list = []

    def row(self, seconds: float) -> dict:
        lat = sorted(self.latencies)
        return {
            "answered": len(lat),
            "rate": len(lat) / seconds,
            "median_s": statistics.median(lat) if lat else float("nan"),
            "p90_s": lat[int(0.9 * (len(lat) - 1))] if lat else float("nan"),
            "refused": self.refused,
            "failed": len(self.failed),
        }


async def ask(http: httpx.AsyncClient, tally: Tally, who: str, n: int) -> bool:
    """One decision; True when answered, False when refused (529/429)."""
    body = {"state": f"{who} request {n}: the forecast says rain over the hills by noon.", "questions": {"q": QUESTION}}
    started = time.perf_counter()
    try:
        r = await http.post("/v1/systemone", json=body)
    except httpx.HTTPError as exc:
        tally.failed.append(type(exc).__name__)
        return False
    if r.status_code == 200:
        tally.latencies.append(time.perf_counter() - started)
        return True
    if r.status_code in (429, 529):
        tally.refused += 1
    else:
        tally.failed.append(r.status_code)
    return False


async def greedy_loop(http: httpx.AsyncClient, tally: Tally, until: float, lane: int) -> None:
    n = 0
    while time.perf_counter() < until:
        n += 1
        if not await ask(http, tally, f"greedy-{lane}", n):
            await asyncio.sleep(0.05)


async def polite_loop(http: httpx.AsyncClient, tally: Tally, until: float) -> None:
    n = 0
    while time.perf_counter() < until:
        n += 1
        await ask(http, tally, "polite", n)


async def phase(url: str, seconds: float, greedy_n: int, with_polite: bool) -> tuple[dict, dict | None]:
    greedy, polite = Tally(), Tally()
    async with client(url, GREEDY, greedy_n + 4) as g, client(url, POLITE, 2) as p:
        until = time.perf_counter() + seconds
        tasks = [greedy_loop(g, greedy, until, lane) for lane in range(greedy_n)]
        if with_polite:
            tasks.append(polite_loop(p, polite, until))
        started = time.perf_counter()
        await asyncio.gather(*tasks)
        wall = time.perf_counter() - started
    return greedy.row(wall), polite.row(wall) if with_polite else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="each phase's length")
    parser.add_argument("--greedy", type=int, default=96, help="decisions the greedy caller keeps in flight")
    parser.add_argument("--flags", default="", help="more `serve` flags, e.g. '--batch-window-ms 5'")
    parser.add_argument("--label", default="", help="a name for this run in the table")
    parser.add_argument("--space", action="store_true", help="measure the Space (python app.py) instead of serve")
    args = parser.parse_args()
    if args.space:  # the Space reads its port and knobs from the environment
        argv = ["env", "GRADIO_SERVER_PORT={port}", "BLINK_MODEL=demo", *shlex.split(args.flags)]
        argv += [sys.executable, str(ROOT / "app.py")]
    else:
        argv = blink_serve(*shlex.split(args.flags))
    server = Server("fairness-" + ("space" if args.space else "serve"), argv, ROOT / "bench" / "out").wait_ready()
    try:
        warm = {"state": "warm-up", "questions": {"q": QUESTION}}
        for _ in range(3):
            httpx.post(server.url + "/v1/systemone", json=warm, timeout=120)
        log(f"greedy alone for {args.seconds:g} s")
        alone, _ = asyncio.run(phase(server.url, args.seconds, args.greedy, with_polite=False))
        log(f"greedy + polite for {args.seconds:g} s")
        greedy, polite = asyncio.run(phase(server.url, args.seconds, args.greedy, with_polite=True))
    finally:
        server.stop()
    print_table(args, alone, greedy, polite)


def print_table(args, alone: dict, greedy: dict, polite: dict) -> None:
    ratio = polite["median_s"] / greedy["median_s"]
    kept = greedy["rate"] / alone["rate"] if alone["rate"] else float("nan")
    where = "the Space" if args.space else "serve"
    print(
        f"\nfairness {args.label} on {where} (greedy {args.greedy} in flight, {args.seconds:g} s a phase, flags "
        f"{args.flags!r})"
    )
    print(
        "| polite median | greedy median | polite / greedy median | polite 529 | polite answered "
        "| greedy rate alone | greedy rate with polite | kept | greedy 529 (with polite) | failures |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    print(
        f"| {polite['median_s'] * 1000:.0f} ms | {greedy['median_s'] * 1000:.0f} ms | {ratio:.2f} "
        f"| {polite['refused']} | {polite['answered']} | {alone['rate']:.1f}/s | {greedy['rate']:.1f}/s "
        f"| {kept:.2f} | {greedy['refused']} | {alone['failed'] + greedy['failed'] + polite['failed']} |"
    )
    print(
        f"targets: polite 529 = 0 ({polite['refused']}), polite/greedy median <= 0.5 ({ratio:.2f}), kept >= 0.8 "
        f"({kept:.2f}); greedy alone: median {alone['median_s'] * 1000:.0f} ms, {alone['refused']} refused"
    )


if __name__ == "__main__":
    main()
