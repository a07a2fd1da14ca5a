"""Hostile-input benchmark: each case of issue 12 against a real `python -m blink serve`, one table.

    .venv/bin/python bench/hostile.py [--column before|after] [--only CASE,...] [--slow-seconds N]

Loopback only, every case bounded in time. For each case: the status the hostile request got, the seconds it
took, the worst `/healthz` latency seen while it ran (polled every 50 ms), and the server's RSS peak and kept
(growth over the RSS just before the case; the server's process tree). The "in limits" cases are the largest
single requests the default limits accept (their peak must stay under 500 MB, their kept under 100 MB); the
overload cases offer 200 requests at 64 connections and at 2x and 4x the server's 24 places (8 queued + 16 in
the running batch) and report goodput (served req/s over one-at-a-time req/s), p99 of the served requests and
the median cost of a refusal. Servers start as the tests start theirs (bench/servers.py). Results are saved to
bench/hostile-results.json under --column, and the table prints every saved column side by side, so the
numbers taken before the fixes stay beside the ones taken after.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import functools
import io
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time

from offline import ROOT  # first: the repository importable, the Hub off

# isort: split

import httpx
import zstandard
from servers import Server, blink_serve

RESULTS = ROOT / "bench" / "hostile-results.json"
MB = 2**20
QUESTION = {"type": "noul", "instructions": "Is this about the weather?"}
SECRET = "hostile-secret-in-query-0123"


def log(msg: str) -> None:
    print(f"[hostile {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def serve(*flags: str, model: str = "demo") -> Server:
    """`python -m blink serve` on a free loopback port, started as the tests start theirs (bench/servers.py); its
    log is kept for the access-log case."""
    if model == "demo-vision":
        flags = (*flags, "--vision", "1")
    s = Server("hostile-serve", blink_serve(*flags, model=model), ROOT / "bench" / "out").wait_ready()
    # one small decision first, so "kept" counts what a case leaves and not the first request's one-time setup
    httpx.post(s.url + "/v1/systemone", json={"state": "warm-up", "questions": {"q": QUESTION}}, timeout=120)
    return s


def prefix_cache_mib(s: Server) -> float:
    """What the server's prefix-state cache holds (bounded by --prefix-cache-mib, by design) per /healthz."""
    try:
        return float(httpx.get(s.url + "/healthz", timeout=10).json().get("prefix_cache", {}).get("used_mib") or 0)
    except (httpx.HTTPError, ValueError):
        return 0.0


class Watch:
    """While a case runs: /healthz latency (worst), polled from a process of its own (bench/poll_healthz.py), so
    the case's own client work in this process (building and sending a 12 MB body, images) never delays the
    poller; and the server's RSS (peak), sampled in a thread."""

    def __init__(self, server: Server):
        self.server = server
        self.cache_base = prefix_cache_mib(server)
        self.base = server.rss()
        self.peak = self.base
        self.health_max = self.health_p50 = self.health_p99 = 0.0
        self.health_fail = 0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._rss, daemon=True)]
        for t in self._threads:
            t.start()
        self._poller = subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / "poll_healthz.py"), server.url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        # the case begins once the poller is polling (its own start is not the server's latency)
        ready = threading.Thread(target=self._poller.stdout.readline, daemon=True)
        ready.start()
        ready.join(timeout=60)

    def _rss(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.server.rss())
            self._stop.wait(0.02)

    def done(self, settle_s: float = 2.0) -> dict:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=65)
        try:
            out, _ = self._poller.communicate("", timeout=90)
            polled = json.loads(out.strip().splitlines()[-1])
            self.health_max, self.health_fail = polled["max_s"], polled["failed"]
            self.health_p50, self.health_p99 = polled["p50_s"], polled["p99_s"]
        except (subprocess.TimeoutExpired, ValueError, IndexError):
            self._poller.kill()
            self.health_fail += 1
        time.sleep(settle_s)  # what the server gives back, it gives back soon
        return {
            "healthz_max_s": round(self.health_max, 3),
            "healthz_p50_s": round(self.health_p50, 3),
            "healthz_p99_s": round(self.health_p99, 3),
            "healthz_failed": self.health_fail,
            "rss_peak_mb": round((self.peak - self.base) / MB),
            "rss_kept_mb": round((self.server.rss() - self.base) / MB),
            "prefix_cache_mb": round(prefix_cache_mib(self.server) - self.cache_base),  # of the kept, the cache's
        }


def timed_post(url: str, path: str, timeout: float = 120, **kwargs) -> tuple[int | str, float, str]:
    t = time.perf_counter()
    try:
        r = httpx.post(url + path, timeout=timeout, **kwargs)
        return r.status_code, time.perf_counter() - t, r.text[:200]
    except httpx.HTTPError as exc:
        return type(exc).__name__, time.perf_counter() - t, str(exc)[:200]


def text_of(n_bytes: int) -> str:
    unit = "The quick brown fox jumps over the lazy dog near the river bank. "
    return (unit * (n_bytes // len(unit) + 1))[:n_bytes]


# the cases ------------------------------------------------------------------------------------------------------
def case_zstd_bomb(s: Server, state_mb: int = 24) -> dict:
    body = json.dumps({"state": text_of(state_mb * MB), "questions": {"q": QUESTION}}).encode()
    packed = zstandard.ZstdCompressor(level=19).compress(body)
    del body
    w = Watch(s)
    status, secs, text = timed_post(
        s.url, "/v1/systemone", content=packed, headers={"content-type": "application/json", "content-encoding": "zstd"}
    )
    return {"status": status, "seconds": round(secs, 2), "sent_bytes": len(packed), **w.done(), "detail": text}


def case_chat_12mb(s: Server) -> dict:
    body = {"model": "demo", "messages": [{"role": "user", "content": text_of(12 * MB)}], "max_tokens": 4}
    w = Watch(s)
    status, secs, text = timed_post(s.url, "/v1/chat/completions", json=body)
    return {"status": status, "seconds": round(secs, 2), **w.done(), "detail": text}


PAST_THE_CONTEXT_MB = 12  # ~2.6M tokens against the 32k window, in a body of a few KB


def past_the_context(route: str) -> dict:
    text = text_of(PAST_THE_CONTEXT_MB * MB)
    q = [{"type": "predicate", "instructions": "Is it about the weather?"}]
    return {
        "/v1/systemone": {"state": text, "questions": {"q": QUESTION}},
        "/v1/decisions": {"model": "demo", "input": text, "questions": q},
        "/v1/chat/completions": {"model": "demo", "max_tokens": 2, "messages": [{"role": "user", "content": text}]},
        "/v1/responses": {"model": "demo", "max_output_tokens": 2, "input": text},
        "/v1/completions": {"model": "demo", "max_tokens": 2, "prompt": text},
        "/v1/completions (echo, a list)": {
            "model": "demo",
            "echo": True,
            "logprobs": 1,
            "max_tokens": 0,
            "prompt": ["a", text],
        },
        "/tokenize": {"model": "demo", "prompt": text},
        "/v1/moderations": {"model": "demo", "input": text},
        # 32 inputs (the most a request takes), each its own decision past the context: 32 capped counts at most
        "/v1/moderations 32 inputs": {"model": "demo", "input": [text[: len(text) // 32]] * 32},
    }[route]


def case_past_the_context(s: Server, route: str) -> dict:
    """A few KB of zstd that decode to a prompt far past the context window: refused by the capped count."""
    packed = zstandard.ZstdCompressor(level=19).compress(json.dumps(past_the_context(route)).encode())
    w = Watch(s)
    status, secs, text = timed_post(
        s.url,
        route.split(" ")[0],
        content=packed,
        headers={"content-type": "application/json", "content-encoding": "zstd"},
    )
    return {"status": status, "seconds": round(secs, 2), "sent_bytes": len(packed), **w.done(), "detail": text}


def case_mcp_past_the_context(s: Server) -> dict:
    """The same over MCP, whose clients send plain JSON (and whose SDK refuses bodies over 4 MB with 413): a
    `decide` call whose 3 MB state (~650k tokens) is far past the window."""
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "decide", "arguments": {"state": text_of(3 * MB), "questions": {"q": QUESTION}}},
    }
    w = Watch(s)
    status, secs, text = timed_post(s.url, "/mcp", json=call, headers={"accept": "application/json, text/event-stream"})
    return {"status": status, "seconds": round(secs, 2), **w.done(), "detail": text}


def case_nested_json(s: Server, depth: int = 100_000) -> dict:
    content = (
        b'{"state": ' + b"[" * depth + b"]" * depth + b', "questions": {"q": ' + json.dumps(QUESTION).encode() + b"}}"
    )
    w = Watch(s)
    status, secs, text = timed_post(
        s.url, "/v1/systemone", content=content, headers={"content-type": "application/json"}
    )
    return {"status": status, "seconds": round(secs, 2), **w.done(0.5), "detail": text}


def case_lone_surrogate(s: Server) -> dict:
    content = b'{"state": "hello \\ud800 world", "questions": {"q": ' + json.dumps(QUESTION).encode() + b"}}"
    w = Watch(s)
    status, secs, text = timed_post(
        s.url, "/v1/systemone", content=content, headers={"content-type": "application/json"}
    )
    return {"status": status, "seconds": round(secs, 2), **w.done(0.5), "detail": text}


def png(width: int, height: int, noise: bool = False) -> bytes:
    from PIL import Image

    if noise:
        image = Image.frombytes("RGB", (width, height), os.urandom(width * height * 3))
    else:
        image = Image.linear_gradient("L").resize((width, height)).convert("RGB")
    out = io.BytesIO()
    image.save(out, "PNG", optimize=True)
    return out.getvalue()


def image_body(images: list[bytes]) -> dict:
    assets = {
        f"<img{i}>": {"type": "image", "format": "png", "data_base64": base64.b64encode(data).decode()}
        for i, data in enumerate(images)
    }
    return {"state": "Look: " + " ".join(assets), "questions": {"q": QUESTION}, "assets": assets}


def case_aspect_png(s: Server) -> dict:
    body = image_body([png(32, 6500)])
    out = {}
    w = Watch(s)
    for path, payload in (
        ("/v1/systemone", body),
        (
            "/v1/decisions",
            {
                "model": "demo",
                "input": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "input_text", "text": "Look"},
                            {
                                "type": "input_image",
                                "image_url": "data:image/png;base64," + body["assets"]["<img0>"]["data_base64"],
                            },
                        ],
                    }
                ],
                "questions": [{"type": "predicate", "name": "q", "instructions": "weather?"}],
            },
        ),
    ):
        status, secs, text = timed_post(s.url, path, json=payload)
        out[path] = (status, round(secs, 2), text)
    statuses = "/".join(str(v[0]) for v in out.values())
    return {
        "status": statuses,
        "seconds": max(v[1] for v in out.values()),
        **w.done(0.5),
        "sent_bytes": len(body["assets"]["<img0>"]["data_base64"]),
        "detail": json.dumps(out)[:300],
    }


def case_png_memory(s: Server, concurrency: int = 8) -> dict:
    # each request: two 20-megapixel PNGs (the largest source the default limits decode), small on the wire
    images = [png(4000, 5000), png(5000, 4000)]
    body = image_body(images)
    sent = sum(len(i) for i in images) * concurrency
    w = Watch(s)
    t = time.perf_counter()
    with httpx.Client(timeout=300) as client:
        results = list(_threads(concurrency, lambda: client.post(s.url + "/v1/systemone", json=body).status_code))
    secs = time.perf_counter() - t
    return {
        "status": "/".join(sorted({str(r) for r in results})),
        "seconds": round(secs, 2),
        "sent_bytes": sent,
        **w.done(),
        "detail": f"{concurrency} concurrent requests of 2 x 20 MP PNGs",
    }


def case_state_at_limit(s: Server, margin: int = 400, questions: int = 4) -> dict:
    """The largest text request the default limits accept: one state `margin` tokens under max_context_tokens
    (32,768; room for the template and the question), `questions` questions (at most 128)."""
    from transformers import AutoTokenizer

    from blink.limits import Limits
    from blink.model.demo import demo_model_dir

    tokenizer = AutoTokenizer.from_pretrained(str(demo_model_dir()))
    target = Limits().max_context_tokens - margin
    unit = len(tokenizer(text_of(10_000))["input_ids"]) / 10_000  # tokens per character of this text
    n = int(target / unit)
    while len(tokenizer(text_of(n))["input_ids"]) > target:
        n = int(n * 0.99)
    tokens = len(tokenizer(text_of(n))["input_ids"])
    body = {"state": text_of(n), "questions": {f"q{i}": QUESTION for i in range(questions)}}
    w = Watch(s)
    status, secs, text = timed_post(s.url, "/v1/systemone", json=body, timeout=600)
    return {"status": status, "seconds": round(secs, 2), **w.done(), "detail": f"{tokens} state tokens; {text}"}


def case_png_one_request(s: Server) -> dict:
    """The largest image request the default limits accept: two 20-megapixel PNGs (the source-pixel limit)."""
    out = case_png_memory(s, concurrency=1)
    out["detail"] = "one request of 2 x 20 MP PNGs"
    return out


def _threads(n: int, fn):
    out = [None] * n

    def run(i):
        try:
            out[i] = fn()
        except Exception as exc:
            out[i] = type(exc).__name__

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def still_open(sock: socket.socket) -> bool:
    """True if the server has neither closed nor answered this connection."""
    sock.setblocking(False)
    try:
        data = sock.recv(1)
        return False if data == b"" else False  # an answer (408, 400) or a close both count as handled
    except BlockingIOError:
        return True
    except OSError:
        return False


def case_slow_clients(s: Server, wait_s: float = 35.0) -> dict:
    """500 idle sockets, 100 slowloris header senders, 50 short bodies, 40 stalled 15 MB uploads."""
    host, port = "127.0.0.1", s.port
    groups: dict[str, list[socket.socket]] = {"idle": [], "slowloris": [], "short_body": [], "stalled_upload": []}
    w = Watch(s)

    def connect():
        sock = socket.create_connection((host, port), timeout=10)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
        return sock

    for _ in range(500):
        groups["idle"].append(connect())
    for _ in range(100):
        sock = connect()
        sock.sendall(b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\n")
        groups["slowloris"].append(sock)
    for _ in range(50):
        sock = connect()
        sock.sendall(
            b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 1000\r\n\r\n{"state": '
        )
        groups["short_body"].append(sock)
    chunk = b"x" * MB
    for _ in range(40):
        sock = connect()
        sock.sendall(
            b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {15 * MB + 1}\r\n\r\n".encode()
        )
        sock.settimeout(5)
        try:
            for _ in range(15):
                sock.sendall(chunk)
        except OSError:
            pass
        groups["stalled_upload"].append(sock)
    deadline = time.time() + wait_s
    while time.time() < deadline:  # slowloris: one more header line now and then, never the blank line
        for sock in groups["slowloris"]:
            try:
                sock.send(b"X-a: b\r\n")
            except OSError:
                pass
        time.sleep(min(5.0, max(0.0, deadline - time.time())))
    held_rss = round((s.rss() - w.base) / MB)
    open_counts = {name: sum(still_open(sock) for sock in socks) for name, socks in groups.items()}
    for socks in groups.values():
        for sock in socks:
            sock.close()
    total = sum(len(v) for v in groups.values())
    return {
        "status": f"{sum(open_counts.values())}/{total} open",
        "seconds": wait_s,
        **w.done(),
        "detail": json.dumps({**open_counts, "rss_while_held_mb": held_rss}),
    }


def case_query_key_in_log(s: Server) -> dict:
    status, secs, _ = timed_post(
        s.url, f"/v1/systemone?api_key={SECRET}", json={"state": "s", "questions": {"q": QUESTION}}
    )
    time.sleep(0.5)
    leaked = SECRET in s.log.read_text(errors="replace")
    return {"status": "leaked" if leaked else "scrubbed", "seconds": round(secs, 2), "detail": f"http {status}"}


def case_healthz_path(s: Server) -> dict:
    body = httpx.get(s.url + "/healthz", timeout=10).json()
    paths = [f"{k}={v}" for k, v in body.items() if isinstance(v, str) and (v.startswith("/") or ":\\" in v)]
    return {"status": "local path" if paths else "clean", "seconds": 0, "detail": "; ".join(paths)[:200]}


# overload -----------------------------------------------------------------------------------------------------
def overload_bodies(n: int = 200) -> list[dict]:
    heavy_state = text_of(3400 * 5)  # ~3,400 tokens of the demo tokenizer (about 5 characters per token)
    heavy = {
        "state": heavy_state,
        "questions": {f"q{i}": {"type": "noul", "instructions": f"Question {i}?"} for i in range(32)},
    }
    return [
        dict(heavy) if i % 10 == 0 else {"state": f"Request {i}: it may rain today.", "questions": {"q": QUESTION}}
        for i in range(n)
    ]


async def one_at_a_time(url: str, bodies: list[dict]) -> float:
    async with httpx.AsyncClient(timeout=300) as client:
        t = time.perf_counter()
        for body in bodies:
            r = await client.post(url + "/v1/systemone", json=body)
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
                        r = await client.post(url + "/v1/systemone", json=body)
                    except httpx.HTTPError as exc:
                        failed.append(type(exc).__name__)
                        break
                    took = time.perf_counter() - t
                    if r.status_code == 200:
                        served.append(took)
                        if set(r.json()["answers"]) != set(body["questions"]):
                            wrong += 1
                        break
                    if r.status_code == 529:
                        refusals.append((took, r.headers.get("retry-after")))
                        if attempt == retries or time.perf_counter() > stop_at:
                            failed.append("529")
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
        "refused_finally": failed.count("529"),
        "other_failures": len(failed) - failed.count("529"),
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
            args=(s.url, "/v1/systemone"),
            kwargs={
                "json": {
                    "state": f"{name}: " + text_of(24_000 * 5),
                    "questions": {f"q{i}": QUESTION for i in range(128)},
                },
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
                r = client.post(s.url + "/v1/systemone", json={"state": "small", "questions": {"q": QUESTION}})
                took = time.perf_counter() - t
                statuses.append(r.status_code)
                if r.status_code != 529:
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


CASES = {
    "zstd bomb 2KB->24MB": ("text", case_zstd_bomb),
    "chat message 12MB": ("text", case_chat_12mb),
    **{
        f"zstd past the context: {route}": ("text", functools.partial(case_past_the_context, route=route))
        for route in (
            "/v1/systemone",
            "/v1/decisions",
            "/v1/chat/completions",
            "/v1/responses",
            "/v1/completions",
            "/v1/completions (echo, a list)",
            "/tokenize",
            "/v1/moderations",
            "/v1/moderations 32 inputs",
        )
    },
    "MCP decide past the context": ("text", case_mcp_past_the_context),
    "nested JSON 100k": ("text", case_nested_json),
    "lone surrogate": ("text", case_lone_surrogate),
    "?api_key= in log": ("text", case_query_key_in_log),
    "/healthz local path": ("text", case_healthz_path),
    "slow clients": ("text", None),
    "PNG 32x6500": ("vision", case_aspect_png),
    "PNGs 8x2x20MP": ("vision", case_png_memory),
    "in limits: state at 32k tokens": ("text", case_state_at_limit),
    "in limits: state at 32k tokens, prefix cache off": ("text-nocache", case_state_at_limit),
    "in limits: 32k tokens x 128 questions": ("text-nocache", functools.partial(case_state_at_limit, questions=128)),
    "in limits: 32k x 128, --pass-cache-mib 256": (
        "text-small-pass",
        functools.partial(case_state_at_limit, questions=128),
    ),
    "in limits: PNGs 2x20MP": ("vision", case_png_one_request),
    "overload 200@64": ("overload", functools.partial(case_overload, 64)),
    "overload 2x: 200@48": ("overload", functools.partial(case_overload, 2 * OVERLOAD_PLACES)),
    "overload 4x: 200@96": ("overload", functools.partial(case_overload, 4 * OVERLOAD_PLACES)),
    "refusal cost (server full)": ("overload", case_refusal_cost),
}


def table(saved: dict) -> str:
    columns = list(saved)
    rows = [
        "| case | " + " | ".join(f"{c}: status | s | healthz max s | RSS peak/kept MB" for c in columns) + " |",
        "|---|" + "---|---|---|---|" * len(columns),
    ]
    names = list(dict.fromkeys(name for col in saved.values() for name in col))
    for name in names:
        cells = []
        for col in columns:
            r = saved[col].get(name)
            if r is None:
                cells += ["", "", "", ""]
                continue
            rss = f"{r.get('rss_peak_mb', '')}/{r.get('rss_kept_mb', '')}" if "rss_peak_mb" in r else ""
            if r.get("prefix_cache_mb"):
                rss += f" (cache {r['prefix_cache_mb']})"
            refusal_ms = r.get("refusal_p50_s") and round(r["refusal_p50_s"] * 1000, 1)
            status = str(r["status"]) + (
                f", goodput {r['goodput']}, p99 {r['p99_s']} s, refusal p50 {refusal_ms} ms, "
                f"{r['refused_finally']} refused"
                if "goodput" in r
                else ""
            )
            if "refusal_server_p50_ms" in r:
                status += (
                    f", refusal p50 {r['refusal_client_p50_ms']} ms (server {r['refusal_server_p50_ms']} ms), "
                    f"worst {r['refusal_client_max_ms']} ms"
                )
            cells += [status, str(r.get("seconds", "")), str(r.get("healthz_max_s", "")), rss]
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--column", default="before", help="the column these results are saved under")
    parser.add_argument("--only", default="", help="comma-separated case names (substring match)")
    parser.add_argument("--slow-seconds", type=float, default=35.0, help="how long the slow clients hold on")
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args()
    wanted = [n for n in CASES if not args.only or any(w.strip().lower() in n.lower() for w in args.only.split(","))]
    saved = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    results = saved.setdefault(args.column, {})
    servers: dict[str, Server] = {}
    try:
        for name in wanted:
            group, fn = CASES[name]
            log(f"case {name}")
            if group == "overload":
                results[name] = fn()
            else:
                if group not in servers:
                    # the text server gets its model as a local folder, as most deployments do (the /healthz case)
                    from blink.model.demo import demo_model_dir

                    flags = {
                        "text-nocache": ("--prefix-cache-mib", "0"),
                        "text-small-pass": ("--prefix-cache-mib", "0", "--pass-cache-mib", "256"),
                    }.get(group, ())
                    servers[group] = serve(*flags, model="demo-vision" if group == "vision" else str(demo_model_dir()))
                s = servers[group]
                if s.proc.poll() is not None:
                    results[name] = {"status": f"server died ({s.proc.returncode})", "seconds": 0}
                    continue
                results[name] = case_slow_clients(s, args.slow_seconds) if name == "slow clients" else fn(s)
            results[name]["measured"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            log(f"  -> {json.dumps(results[name])[:400]}")
            if not args.no_save:
                RESULTS.write_text(json.dumps(saved, indent=1) + "\n")
    finally:
        for s in servers.values():
            s.stop()
    print(table(saved))


if __name__ == "__main__":
    main()
