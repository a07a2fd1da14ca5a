"""Sockets and queues that fail, on `python -m blink serve` with the demo model, before and after side by side.

    .venv/bin/python bench/stress/faults.py [--code DIR] [--idle 1000] [--slowloris 100]

- idle sockets: `--idle` connections that never send a byte and `--slowloris` that send a head one line at a
  time are opened; then `/healthz` and one normal decision are asked (status, seconds);
- abandoned queue: 24 long decisions (~3,400 tokens, 32 questions) are sent on raw sockets that close as soon as
  the server has admitted them; then one normal decision is asked (status, seconds), and after the queue drains,
  how many of the 24 were computed.
`--code DIR` runs blink from another checkout, so the figures before a change stand beside the ones after.
Loopback only; every wait bounded.
"""

from __future__ import annotations

import argparse
import json
import socket
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
QUESTION = {"type": "noul", "instructions": "Is this about the weather?"}
HEAVY = {
    "state": "The quick brown fox jumps over the lazy dog near the river bank. " * 220,
    "questions": {f"q{i}": {"type": "noul", "instructions": f"Question {i}?"} for i in range(32)},
}


def log(msg: str) -> None:
    print(f"[faults {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def start(code: Path, *flags: str):
    port = free_port()
    argv = [sys.executable, "-m", "blink", "serve", "--model", "demo", "--port", str(port), *flags]
    log_path = OUT / f"faults-{port}.log"
    proc = launch(argv, port, server_env(DEMO_ROOT, {"PYTHONPATH": str(code)}), log_path, cwd=code)
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, proc, log_path, timeout=300)
    httpx.post(url + "/v1/systemone", json={"state": "warm", "questions": {"q": QUESTION}}, timeout=120)
    return url, port, proc


def timed(fn) -> tuple[str, float]:
    t = time.perf_counter()
    try:
        status = str(fn().status_code)
    except httpx.HTTPError as exc:
        status = type(exc).__name__
    return status, round(time.perf_counter() - t, 3)


def idle_sockets(code: Path, idle: int, slowloris: int) -> dict:
    url, port, proc = start(code)
    socks = []
    try:
        for _ in range(idle):
            socks.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        for _ in range(slowloris):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nX-a: b\r\n")
            socks.append(s)
        time.sleep(0.5)
        with httpx.Client(base_url=url, timeout=30) as client:
            health = timed(lambda: client.get("/healthz"))
            decide = timed(
                lambda: client.post("/v1/systemone", json={"state": "It may rain.", "questions": {"q": QUESTION}})
            )
        return {"healthz": health, "decision": decide}
    finally:
        for s in socks:
            s.close()
        stop_group(proc)


def abandoned(code: Path, n: int = 24) -> dict:
    url, port, proc = start(code, "--max-queued-requests", "8")
    data = json.dumps(HEAVY).encode()
    head = (
        b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(data)}\r\n\r\n".encode()
    )
    try:
        with httpx.Client(base_url=url, timeout=300) as client:
            before = client.get("/healthz").json()["batching"]["requests"]
            socks = []
            for _ in range(n):
                s = socket.create_connection(("127.0.0.1", port), timeout=10)
                s.sendall(head + data)
                socks.append(s)
            deadline = time.time() + 60
            while time.time() < deadline:
                if client.get("/healthz").json()["admission"]["decide"]["held"]["keyed"] >= n - 4:
                    break
                time.sleep(0.1)
            for s in socks:
                s.close()
            time.sleep(0.3)
            nxt = timed(
                lambda: client.post("/v1/systemone", json={"state": "It may rain.", "questions": {"q": QUESTION}})
            )
            deadline = time.time() + 300
            while time.time() < deadline:
                h = client.get("/healthz").json()
                if h["admission"]["decide"]["held"]["keyed"] == 0 and h["batching"]["queued"] == 0:
                    break
                time.sleep(0.2)
            time.sleep(1.0)
            computed = client.get("/healthz").json()["batching"]["requests"] - before - (nxt[0] == "200")
        return {"next_decision": nxt, "computed_of_abandoned": f"{computed}/{n}"}
    finally:
        stop_group(proc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--code", type=Path, default=ROOT)
    parser.add_argument("--idle", type=int, default=1000)
    parser.add_argument("--slowloris", type=int, default=100)
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    log(f"idle sockets ({args.code})")
    a = idle_sockets(args.code, args.idle, args.slowloris)
    log(f"  -> {a}")
    log("abandoned queue")
    b = abandoned(args.code)
    log(f"  -> {b}")
    print(json.dumps({"code": str(args.code), "idle_sockets": a, "abandoned": b}))


if __name__ == "__main__":
    main()
