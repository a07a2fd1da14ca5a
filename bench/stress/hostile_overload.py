"""The overload cases (bench/stress/hostile.py runs them): 200 requests offered at several times the server's places,
with the goodput, p99 and refusals that result, and what one refusal costs the server when it is full. Each
starts a server of its own with small queues, so these live apart from the cases that share one."""

from __future__ import annotations

import asyncio
import json
import statistics
import threading
import time

import httpx
from hostile_harness import QUESTION, Watch, serve, text_of, timed_post, wire
from servers import Server


def overload_bodies(n: int = 200) -> list[dict]:
    heavy_state = text_of(3400 * 5)  # ~3,400 tokens of the demo tokenizer (about 5 characters per token)
    heavy = wire().body(heavy_state, {f"q{i}": {"type": "noul", "instructions": f"Question {i}?"} for i in range(32)})
    return [dict(heavy) if i % 10 == 0 else wire().body(f"Request {i}: it may rain today.") for i in range(n)]


async def one_at_a_time(url: str, bodies: list[dict]) -> float:
    async with httpx.AsyncClient(timeout=300) as client:
        t = time.perf_counter()
        for body in bodies:
            r = await client.post(url + wire().path, json=body)
            r.raise_for_status()
        return len(bodies) / (time.perf_counter() - t)


async def offered(url: str, bodies: list[dict], connections: int, retries: int, deadline_s: float) -> dict:
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    served, refusals, failed, wrong = [], [], [], 0
    queue: asyncio.Queue = asyncio.Queue()
    for i, body in enumerate(bodies):
        queue.put_nowait((i, body))
    stop_at = time.perf_counter() + deadline_s

    async with httpx.AsyncClient(timeout=300, limits=limits) as client:

        async def worker():
            nonlocal wrong
            while not queue.empty():
                i, body = queue.get_nowait()
                for attempt in range(retries + 1):
                    t = time.perf_counter()
                    try:
                        r = await client.post(url + wire().path, json=body)
                    except httpx.HTTPError as exc:
                        failed.append(type(exc).__name__)
                        break
                    took = time.perf_counter() - t
                    if r.status_code == 200:
                        served.append(took)
                        if set(r.json()["answers"]) != set(body["questions"]):
                            wrong += 1
                        break
                    if r.status_code == wire().overloaded:
                        refusals.append((took, r.headers.get("retry-after")))
                        if attempt == retries or time.perf_counter() > stop_at:
                            failed.append("refused")
                            break
                        await asyncio.sleep(min(float(r.headers.get("retry-after") or 1), 2.0))
                        continue
                    failed.append(str(r.status_code))
                    break

        t = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(connections)))
        wall = time.perf_counter() - t
    served.sort()
    return {
        "served": len(served),
        "served_per_s": len(served) / wall,
        "wall_s": wall,
        "p99_s": served[min(len(served) - 1, int(len(served) * 0.99))] if served else None,
        "refused_finally": failed.count("refused"),
        "other_failures": len(failed) - failed.count("refused"),
        "refusals": len(refusals),
        "refusal_p50_s": statistics.median(r[0] for r in refusals) if refusals else None,
        "missing_retry_after": sum(1 for r in refusals if not r[1]),
        "wrong_answers": wrong,
        "failures": {kind: failed.count(kind) for kind in sorted(set(failed))},
    }


# the overload server: 8 queued + 16 (the default batch) in the batch being run = 24 places a decision can hold
OVERLOAD_FLAGS = ("--batch-window-ms", "10", "--max-queued-requests", "8")
OVERLOAD_PLACES = 8 + 16


def case_overload(connections: int, retries: int = 8, deadline_s: float = 150.0) -> dict:
    """200 requests over `connections` closed-loop clients (offered load: connections / OVERLOAD_PLACES), each
    retrying a 529 up to `retries` times after its Retry-After (at most 2 s); goodput is the served rate over
    the one-at-a-time rate of the same mix, measured first on the same server."""
    s = serve(*OVERLOAD_FLAGS)
    try:
        bodies = overload_bodies()
        w = Watch(s)
        solo = asyncio.run(one_at_a_time(s.url, bodies[:40]))
        load = asyncio.run(offered(s.url, bodies, connections, retries, deadline_s))
        watched = w.done()
    finally:
        s.stop()
    return {
        "offered_x": round(connections / OVERLOAD_PLACES, 2),
        "status": f"{load['served']}/200 served",
        "seconds": round(load["wall_s"], 1),
        **watched,
        "goodput": round(load["served_per_s"] / solo, 2),
        "solo_per_s": round(solo, 2),
        "served_per_s": round(load["served_per_s"], 2),
        "p99_s": load["p99_s"] and round(load["p99_s"], 2),
        "refused_finally": load["refused_finally"],
        "refusal_p50_s": load["refusal_p50_s"] and round(load["refusal_p50_s"], 3),
        "detail": json.dumps(
            {k: load[k] for k in ("refusals", "other_failures", "failures", "missing_retry_after", "wrong_answers")}
        ),
    }


def places_held(s: Server) -> int:
    decide = httpx.get(s.url + "/healthz", timeout=10).json()["admission"]["decide"]
    return sum(decide["held"].values())


def case_refusal_cost(n: int = 100) -> dict:
    """What a refusal costs the server itself: its two places (`--max-queued-requests 1`, one in the batch) held
    by two long requests (different states, no prefix cache: neither is quick), no waiting (`--decide-wait-s 0`),
    then `n` small requests one after another, each a 529 at once. Client-side milliseconds of the 529s (median
    and worst) and the server's own `server-timing` total."""
    s = serve(
        "--decide-wait-s", "0", "--max-queued-requests", "1", "--max-batch-requests", "1", "--prefix-cache-mib", "0"
    )
    holders = [
        threading.Thread(
            target=timed_post,
            args=(s.url, wire().path),
            kwargs={
                "json": wire().body(f"{name}: " + text_of(24_000 * 5), {f"q{i}": QUESTION for i in range(128)}),
                "timeout": 600,
            },
        )
        for name in ("first", "second")
    ]
    try:
        w = Watch(s)
        for t in holders:
            t.start()
        deadline = time.time() + 30
        while places_held(s) < 2 and time.time() < deadline:
            time.sleep(0.02)
        client_s, server_ms, statuses = [], [], []
        with httpx.Client(timeout=60) as client:
            for _ in range(n):
                t = time.perf_counter()
                r = client.post(s.url + wire().path, json=wire().body("small"))
                took = time.perf_counter() - t
                statuses.append(r.status_code)
                if r.status_code != wire().overloaded:
                    continue
                client_s.append(took)
                # the server's own time: its total less the wait for the client's body (read before admission)
                phases = dict(p.strip().split(";dur=") for p in r.headers.get("server-timing", "").split(",") if p)
                if "total" in phases:
                    server_ms.append(float(phases["total"]) - float(phases.get("body", 0)))
        for t in holders:
            t.join()
        watched = w.done(0.5)
    finally:
        s.stop()
    client_s.sort()
    return {
        "status": "/".join(f"{code}x{statuses.count(code)}" for code in sorted(set(statuses))),
        "seconds": round(sum(client_s), 2),
        **watched,
        "refusal_client_p50_ms": client_s and round(statistics.median(client_s) * 1000, 1),
        "refusal_client_max_ms": client_s and round(client_s[-1] * 1000, 1),
        "refusal_server_p50_ms": server_ms and round(statistics.median(server_ms), 2),
        "detail": f"{n} small requests, one at a time, while two long ones hold both places",
    }
