"""Soak: mixed traffic at about 80 % of capacity on `python -m blink serve` (the demo model) for `--minutes`.

    .venv/bin/python bench/stress/soak.py [--minutes 20] [--load 0.8] [--url URL] [--code DIR]

First the capacity: 8 closed-loop clients sending the same mix for `--capacity-s`, in arrivals answered per
second. Then open-loop arrivals at `--load` times that, for `--minutes`: 75 % decisions (small, and one in ten
a long state with 8 questions), 10 % chat streams (16 tokens, read to the end), 10 % clients that send a
decision and leave before the answer, 5 % hostile bodies (malformed JSON, a lone surrogate, nesting past the
limit, a body past the cap: each must be a 4xx). Every 5 s the server's RSS (its process tree), open file
descriptors and threads are sampled.

`--fill` first fills the prefix-state cache to its budget (reranks of distinct short documents, as fast as the
server answers them: each document is an entry) and then soaks with the cache full, evicting as it goes: reported
beside the rest, RSS at the end less the server's RSS without its cache (sampled once the cache held 40 MiB, less
those), against the cache's budget (target: within the budget + 50 MB).

Reported: RSS growth from the end of the warm-up (the first fifth, at least one minute when the run is long enough)
to the end (target < 50 MB), the range of fds and threads after the warm-up (flat), decision p50/p99 in the first
and the last fifth (stable), and every status seen (5xx must be 0). `--url` soaks a server already running (the
Space: give `--pid` for its samples). Loopback only; arrivals bounded in count and in flight.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: offline.py and the shared modules
from offline import ROOT  # first: the repository importable, the Hub off

# isort: split

import httpx
import psutil
from servers import DEMO_ROOT

from helpers import free_port, launch, server_env, stop_group, wait_healthy

OUT = ROOT / "bench" / "out"
QUESTION = {"type": "noul", "instructions": "Is this about the weather?"}
MAX_IN_FLIGHT = 128


def log(msg: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def small(i: int) -> dict:
    return {"state": f"Note {i}: it may rain at {i % 24}:00 today.", "questions": {"q": QUESTION}}


def long(i: int) -> dict:
    return {
        "state": f"Ticket {i}. " + "The parcel was late and the box was dented when it arrived. " * 40,
        "questions": {f"q{k}": {"type": "noul", "instructions": f"Question {k}?"} for k in range(8)},
    }


HOSTILE = [
    ("application/json", b'{"state": "x", "questions": '),
    ("application/json", b'{"state": "\\ud800", "questions": {"q": {"type": "noul"}}}'),
    ("application/json", b'{"state": ' + b"[" * 50_000 + b"]" * 50_000 + b', "questions": {}}'),
    ("application/json", b'{"state": "' + b"x" * (20 * 2**20) + b'", "questions": {"q": {"type": "noul"}}}'),
]


class Sampler:
    def __init__(self, pid: int, url: str | None = None):
        self.process = psutil.Process(pid)
        self.url = url
        self.rows: list[dict] = []

    def cache_mb(self) -> float:
        """What the prefix-state cache holds (bounded by --prefix-cache-mib by design), to tell it from a leak."""
        try:
            return float(cache_stats(self.url, timeout=10).get("used_mib") or 0)
        except (httpx.HTTPError, ValueError, TypeError):
            return 0.0

    def sample(self, t: float) -> None:
        try:
            procs = [self.process, *self.process.children(recursive=True)]
            self.rows.append(
                {
                    "t": t,
                    "rss_mb": sum(p.memory_info().rss for p in procs) / 2**20,
                    "fds": sum(p.num_fds() for p in procs),
                    "threads": sum(p.num_threads() for p in procs),
                    "cache_mb": self.cache_mb() if self.url else 0.0,
                }
            )
        except psutil.Error:
            pass


async def capacity(url: str, port: int, model: str, seconds: float, clients: int = 8) -> float:
    """Arrivals of the same mix per second that `clients` closed-loop clients get answered: the capacity."""
    rng = random.Random(11)
    statuses: Counter = Counter()
    done = 0
    stop_at = time.perf_counter() + seconds
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:

        async def loop(c: int) -> None:
            nonlocal done
            for k in range(100_000):
                if time.perf_counter() >= stop_at:
                    return
                await send(client, port, model, c * 100_000 + k, pick(rng.random()), 0.0, statuses, [])
                done += 1

        t = time.perf_counter()
        await asyncio.gather(*(loop(c) for c in range(clients)))
    return done / (time.perf_counter() - t)


async def leave_early(port: int, body: dict) -> str:
    data = json.dumps(body).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(data)}\r\n\r\n".encode()
        + data
    )
    await writer.drain()
    await asyncio.sleep(0.02)
    writer.transport.abort()
    return "left"


def pick(roll: float) -> str:
    return "decision" if roll < 0.75 else "chat" if roll < 0.85 else "leave" if roll < 0.95 else "hostile"


async def send(client, port: int, model: str, i: int, kind: str, at: float, statuses: Counter, latencies: list) -> None:
    """One arrival of the mix, its outcome counted."""
    t = time.perf_counter()
    try:
        if kind == "decision":
            r = await client.post("/v1/systemone", json=long(i) if i % 10 == 0 else small(i))
            statuses[f"decision {r.status_code}"] += 1
            if r.status_code == 200:
                latencies.append((at, time.perf_counter() - t))
        elif kind == "chat":
            body = {
                "model": model,
                "messages": [{"role": "user", "content": f"Say something about parcel {i}."}],
                "max_tokens": 16,
                "stream": True,
            }
            async with client.stream("POST", "/v1/chat/completions", json=body) as r:
                async for _ in r.aiter_lines():
                    pass
            statuses[f"chat {r.status_code}"] += 1
        elif kind == "leave":
            statuses[await leave_early(port, small(i))] += 1
        else:
            content_type, data = HOSTILE[i % len(HOSTILE)]
            r = await client.post("/v1/systemone", content=data, headers={"content-type": content_type})
            statuses[f"hostile {r.status_code}"] += 1
    except (httpx.HTTPError, OSError) as exc:
        statuses[f"{kind} {type(exc).__name__}"] += 1


async def soak(url: str, port: int, rate: float, seconds: float, sampler: Sampler | None, model: str) -> dict:
    rng = random.Random(7)
    statuses: Counter = Counter()
    latencies: list[tuple[float, float]] = []  # (arrival time from start, seconds) of answered decisions
    in_flight = 0
    skipped = 0
    limits = httpx.Limits(max_connections=MAX_IN_FLIGHT + 8, max_keepalive_connections=64)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:

        async def one(i: int, kind: str, at: float) -> None:
            nonlocal in_flight
            try:
                await send(client, port, model, i, kind, at, statuses, latencies)
            finally:
                in_flight -= 1

        tasks = set()
        start = time.perf_counter()
        next_sample = 0.0
        i = 0
        while (now := time.perf_counter() - start) < seconds and i < 10_000_000:
            if sampler is not None and now >= next_sample:
                sampler.sample(now)
                next_sample += 5.0
            kind = pick(rng.random())
            if in_flight >= MAX_IN_FLIGHT:
                skipped += 1
            else:
                in_flight += 1
                task = asyncio.create_task(one(i, kind, now))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            i += 1
            await asyncio.sleep(rng.expovariate(rate))
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 180)
        if sampler is not None:
            sampler.sample(time.perf_counter() - start)
    return {"statuses": dict(statuses), "latencies": latencies, "arrivals": i, "skipped": skipped}


WORDS = "parcel late box dented refund courier weather rain noon hills invoice order driver door note".split()
RECORDS = itertools.count()  # every document filled is distinct


def documents(rng: random.Random, count: int) -> list[str]:
    """`count` distinct short documents (3-12 words): the entries with the most overhead per byte counted, and the
    quickest to fill the cache with (an entry's fixed recurrent state is most of it)."""
    return [f"Record {next(RECORDS)}: " + " ".join(rng.choices(WORDS, k=rng.randint(3, 12))) for _ in range(count)]


def cache_stats(url: str, timeout: float = 30) -> dict:
    """/healthz's prefix-state cache figures (bounded by --prefix-cache-mib by design)."""
    return httpx.get(url + "/healthz", timeout=timeout).json().get("prefix_cache") or {}


async def fill(url: str, model: str, until_mib: float, most_s: float = 3600.0, workers: int = 2) -> dict:
    """Reranks of 32 distinct documents each, `workers` at a time, until the cache holds `until_mib`."""
    rng = random.Random(5)
    stats, sent = cache_stats(url), 0
    stop_at = time.perf_counter() + most_s
    async with httpx.AsyncClient(base_url=url, timeout=300) as client:

        async def worker() -> None:
            nonlocal sent, stats
            while time.perf_counter() < stop_at and stats.get("used_mib", 0) < until_mib:
                body = {"model": model, "query": "Is it about a late parcel?", "documents": documents(rng, 32)}
                sent += 1
                (await client.post("/v1/rerank", json=body)).raise_for_status()
                stats = await asyncio.to_thread(cache_stats, url)
                if sent % 50 == 0:
                    log(f"fill: {sent} reranks, cache {stats['used_mib']:.0f} of {stats['max_mib']:.0f} MiB")

        await asyncio.gather(*(worker() for _ in range(workers)))
    return {"reranks": sent, **stats}


def against_budget(base: dict, rows: list[dict], budget_mib: float) -> dict:
    """The server's RSS through the soak (its end and its peak) less its RSS without the cache, against the cache's
    budget."""
    without = base["rss_mb"] - base["cache_mb"]
    end, peak = rows[-1]["rss_mb"] - without, max(r["rss_mb"] for r in rows) - without
    return {
        "rss_without_cache_mb": round(without, 1),
        "cache_budget_mib": budget_mib,
        "cache_end_mib": round(rows[-1]["cache_mb"], 1),
        "cost_end_mb": round(end, 1),
        "cost_peak_mb": round(peak, 1),
        "over_budget_end_mb": round(end - budget_mib, 1),
        "over_budget_peak_mb": round(peak - budget_mib, 1),
    }


def quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q))]


def summary(run: dict, samples: list[dict], seconds: float) -> dict:
    fifth = seconds / 5
    warm = max(min(60.0, seconds / 2), fifth) if seconds >= 300 else fifth
    after = [s for s in samples if s["t"] >= warm] or samples
    first = [lat for at, lat in run["latencies"] if at < fifth]
    last = [lat for at, lat in run["latencies"] if at >= seconds - fifth]
    return {
        "warmup_s": warm,
        "rss_mb_after_warmup": round(after[0]["rss_mb"], 1),
        "rss_mb_end": round(after[-1]["rss_mb"], 1),
        "rss_growth_mb": round(after[-1]["rss_mb"] - after[0]["rss_mb"], 1),
        "rss_max_after_warmup_mb": round(max(s["rss_mb"] for s in after), 1),
        "prefix_cache_growth_mb": round(after[-1].get("cache_mb", 0) - after[0].get("cache_mb", 0), 1),
        # the prefix-state cache fills by design up to its bound (--prefix-cache-mib): the rest is what could leak
        "rss_growth_less_cache_mb": round(
            after[-1]["rss_mb"] - after[0]["rss_mb"] - (after[-1].get("cache_mb", 0) - after[0].get("cache_mb", 0)), 1
        ),
        "fds": [min(s["fds"] for s in after), max(s["fds"] for s in after), after[-1]["fds"]],
        "threads": [min(s["threads"] for s in after), max(s["threads"] for s in after), after[-1]["threads"]],
        "p50_first_s": round(quantile(first, 0.5), 3),
        "p99_first_s": round(quantile(first, 0.99), 3),
        "p50_last_s": round(quantile(last, 0.5), 3),
        "p99_last_s": round(quantile(last, 0.99), 3),
        # the trend, not only its ends: p99 of the decisions that arrived in each minute
        "p99_by_minute_s": [
            round(quantile([lat for at, lat in run["latencies"] if m * 60 <= at < (m + 1) * 60], 0.99), 3)
            for m in range(int(seconds // 60))
        ],
        "five_xx": sum(
            n for k, n in run["statuses"].items() if k.split()[-1].startswith("5") and k.split()[-1] != "529"
        ),
        "statuses": run["statuses"],
        "arrivals": run["arrivals"],
        "skipped_in_flight_cap": run["skipped"],
    }


def full_cache(url: str, model: str, sampler: Sampler | None) -> dict:
    """The cache filled to its budget (--fill). The base is sampled once the cache has first trimmed the C heap
    (past 40 MiB of churn): before it, RSS still holds what loading the model freed, and it drops at that trim."""
    if sampler is None:
        raise SystemExit("--fill needs the server's process: give --pid with --url")
    started = time.perf_counter()
    asyncio.run(fill(url, model, 40.0))
    sampler.sample(0.0)
    base = sampler.rows.pop()
    stats = asyncio.run(fill(url, model, 0.97 * cache_stats(url)["max_mib"]))
    log(f"filled: {stats['used_mib']:.0f} MiB in {time.perf_counter() - started:.0f} s")
    return {"base": base, "fill_s": round(time.perf_counter() - started, 1), **stats}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument("--load", type=float, default=0.8)
    parser.add_argument("--capacity-s", type=float, default=20.0)
    parser.add_argument("--rate", type=float, default=None, help="arrivals/s to offer instead of --load x capacity")
    parser.add_argument("--url", default=None, help="soak a running server instead of starting one")
    parser.add_argument("--pid", type=int, default=None, help="with --url: the server's process, for its samples")
    parser.add_argument("--code", type=Path, default=ROOT)
    parser.add_argument("--fill", action="store_true", help="fill the prefix-state cache first, then soak")
    parser.add_argument("--serve-flags", default="", help="more `serve` flags, e.g. '--prefix-cache-mib 0'")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    proc = None
    if args.url:
        url, port, pid = args.url.rstrip("/"), int(args.url.rstrip("/").rsplit(":", 1)[1]), args.pid
    else:
        port = free_port()
        argv = [sys.executable, "-m", "blink", "serve", "--model", "demo", "--port", str(port)]
        argv += args.serve_flags.split()
        log_path = OUT / f"soak-{port}.log"
        proc = launch(argv, port, server_env(DEMO_ROOT, {"PYTHONPATH": str(args.code)}), log_path, cwd=args.code)
        url, pid = f"http://127.0.0.1:{port}", proc.pid
        wait_healthy(url, proc, log_path, timeout=300)
    try:
        model = httpx.get(url + "/v1/models", timeout=30).json()["data"][0]["id"]
        cap = asyncio.run(capacity(url, port, model, args.capacity_s))
        rate = args.rate or max(0.5, args.load * cap)
        log(f"capacity {cap:.1f} arrivals/s of the mix; offering {rate:.1f}/s for {args.minutes} min")
        sampler = Sampler(pid, url) if pid else None
        filled = full_cache(url, model, sampler) if args.fill else {}
        seconds = args.minutes * 60
        run = asyncio.run(soak(url, port, rate, seconds, sampler, model))
        result = {
            "capacity_rps": round(cap, 2),
            "rate": round(rate, 2),
            "minutes": args.minutes,
            **summary(run, sampler.rows if sampler else [{"t": 0, "rss_mb": 0, "fds": 0, "threads": 0}], seconds),
        }
        if filled:
            result["full_cache"] = {**filled, **against_budget(filled["base"], sampler.rows, filled["max_mib"])}
    finally:
        if proc is not None:
            stop_group(proc)
    (OUT / "soak.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    print(
        f"\n| minutes | rate (of capacity) | RSS growth after warm-up (less the prefix cache's) | fds min/max | "
        f"threads min/max | p50/p99 first fifth | p50/p99 last fifth | 5xx |\n|---|---|---|---|---|---|---|---|\n"
        f"| {args.minutes:g} | {rate:.1f}/s ({args.load:.0%} of {cap:.1f}) | {result['rss_growth_mb']} MB "
        f"({result['rss_growth_less_cache_mb']} MB) | "
        f"{result['fds'][0]}/{result['fds'][1]} | {result['threads'][0]}/{result['threads'][1]} | "
        f"{result['p50_first_s']}/{result['p99_first_s']} s | {result['p50_last_s']}/{result['p99_last_s']} s | "
        f"{result['five_xx']} |"
    )


if __name__ == "__main__":
    main()
