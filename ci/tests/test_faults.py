"""Nobody can deny service, nothing is lost, on a real `python -m blink serve` with the demo model:

- idle sockets and slowloris heads never keep `/healthz` or a normal decision out (the connection bound is the
  process's file descriptors, and a new connection takes the place of the oldest idle one);
- a request whose client is gone frees its place at once: decisions abandoned while queued are never computed and
  the next normal decision is admitted.

Bounds are generous: these assert behaviour, the figures live in bench/ (bench/RESULTS.md)."""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest

from blink.web.guard import Connections
from helpers import blink_serve, running

QUESTION = {"type": "noul", "instructions": "Is this about the weather?"}


def decision(state: str = "It may rain today.") -> dict:
    return {"state": state, "questions": {"q": QUESTION}}


def test_healthz_and_a_decision_answer_while_1000_idle_and_100_slowloris_sockets_are_open(server):
    port = int(server.rsplit(":", 1)[1])
    socks: list[socket.socket] = []
    try:
        for _ in range(1000):
            socks.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        for _ in range(100):
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            sock.sendall(b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nX-a: b\r\n")
            socks.append(sock)
        with httpx.Client(base_url=server, timeout=30) as client:
            assert client.get("/healthz").status_code == 200
            r = client.post("/v1/systemone", json=decision())
            assert r.status_code == 200, r.text
            assert set(r.json()["answers"]) == {"q"}
    finally:
        for sock in socks:
            sock.close()


class Conn:
    def __init__(self, peer: str, busy: bool = False):
        self.peer, self.busy, self.evicted = peer, busy, False

    def evict(self) -> None:
        self.evicted = True


def test_a_new_connection_takes_the_place_of_the_oldest_idle_one():
    registry = Connections(cap=4, per_client=2)
    a1, a2, a3 = Conn("a"), Conn("a", busy=True), Conn("a")
    assert registry.open(a1, "a") and registry.open(a2, "a")
    assert registry.open(a3, "a") and a1.evicted and not a2.evicted  # per client: its own oldest idle one goes
    a2.busy = True
    a3.busy = True
    assert not registry.open(Conn("a"), "a")  # all of its connections are busy with requests: refused
    b1, c1 = Conn("b"), Conn("c")
    assert registry.open(b1, "b") and registry.open(c1, "c")
    assert registry.total == 4
    d1 = Conn("d")
    assert registry.open(d1, "d")  # the cap: the idle connection of a peer holding the most goes
    assert b1.evicted or c1.evicted
    assert registry.total == 4 and not (a2.evicted or a3.evicted)
    registry.close(d1)
    assert registry.total == 3


def raw_post(port: int, body: dict) -> socket.socket:
    data = json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(
        b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(data)}\r\n\r\n".encode()
        + data
    )
    return sock


@pytest.mark.timeout(600)
def test_decisions_whose_clients_left_free_their_places_at_once(demo_root):
    # 8 queue slots + 16 places of a running batch = 24 places, of which one caller holds at most 16 (the last 8 are
    # kept for other callers); one decision runs at a time
    heavy = {
        "state": "The quick brown fox jumps over the lazy dog near the river bank. " * 220,
        "questions": {f"q{i}": {"type": "noul", "instructions": f"Question {i}?"} for i in range(32)},
    }
    with running(blink_serve("--max-queued-requests", "8"), demo_root, name="serve-abandoned") as url:
        port = int(url.rsplit(":", 1)[1])
        with httpx.Client(base_url=url, timeout=120) as client:
            socks = [raw_post(port, heavy) for _ in range(24)]
            deadline = time.time() + 60
            while time.time() < deadline:  # every place this caller may hold taken (bodies read, requests admitted)
                held = client.get("/healthz").json()["admission"]["decide"]["held"]["keyed"]
                if held >= 16:
                    break
                time.sleep(0.1)
            assert held == 16, held
            for sock in socks:
                sock.close()  # every client leaves
            # the next normal decision is admitted (before: 529 "too many requests are waiting" until all 24 ran)
            r = client.post("/v1/systemone", json=decision())
            assert r.status_code == 200, r.text
            deadline = time.time() + 60
            while time.time() < deadline:
                health = client.get("/healthz").json()
                if health["admission"]["decide"]["held"]["keyed"] == 0:
                    break
                time.sleep(0.1)
            assert health["admission"]["decide"]["held"]["keyed"] == 0
            # at most the ones already running were computed: the queued ones were dropped
            assert health["batching"]["requests"] < 1 + 24
