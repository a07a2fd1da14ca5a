"""Slow clients against a real uvicorn on loopback running blink.web.guard: heads, bodies and idle sockets end."""

from __future__ import annotations

import logging
import socket
import threading
import time

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from blink.web.guard import BodyDeadline, ScrubQuery, SlowClientLimits, tune, uvicorn_options
from helpers import free_port

pytestmark = pytest.mark.e2e

LIMITS = SlowClientLimits(header_s=1.0, keep_alive_s=1, body_idle_s=1.0, body_total_s=3.0, max_connections=64)


async def echo(request: Request):
    body = await request.body()
    return JSONResponse({"bytes": len(body)})


@pytest.fixture(scope="module")
def guarded():
    app = BodyDeadline(
        Starlette(routes=[Route("/echo", echo, methods=["POST", "GET"])]), LIMITS.body_idle_s, LIMITS.body_total_s
    )
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", **uvicorn_options(LIMITS))
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 20
    while not server.started and time.time() < deadline:
        time.sleep(0.05)
    yield port, server
    server.should_exit = True
    thread.join(timeout=10)


def closed_within(sock: socket.socket, seconds: float) -> tuple[bool, bytes]:
    """Whether the server ends this connection within `seconds`, and what it sent first."""
    sock.settimeout(seconds)
    got = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return True, got
            got += chunk
    except TimeoutError:
        return False, got
    except ConnectionResetError:
        return True, got


def test_an_idle_fresh_connection_is_closed(guarded):
    port, _ = guarded
    with socket.create_connection(("127.0.0.1", port)) as sock:
        assert closed_within(sock, 4)[0]


def test_slowloris_headers_are_cut_off(guarded):
    port, _ = guarded
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\n")
        t = time.time()
        closed = False
        while time.time() - t < 5 and not closed:
            try:
                sock.sendall(b"X-a: b\r\n")
            except OSError:
                closed = True
                break
            closed, _ = closed_within(sock, 0.3)
        assert closed, "a head trickled one line at a time must not hold the connection"


def test_a_stalled_body_gets_408_and_the_connection_ends(guarded):
    port, _ = guarded
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n" + b"a" * 10)
        closed, got = closed_within(sock, 5)
        assert closed and got.startswith(b"HTTP/1.1 408"), got[:200]


def test_a_trickled_body_meets_the_total_deadline(guarded):
    """One byte every 0.3 s never trips the idle deadline; the total deadline ends it."""
    port, _ = guarded
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
        t = time.time()
        got, ended = b"", False
        while time.time() - t < 8 and not ended:
            try:
                sock.sendall(b"a")
                sock.settimeout(0.3)
                chunk = sock.recv(65536)
                got += chunk
                ended = not chunk
            except TimeoutError:
                pass
            except OSError:  # reset: the server closed while we were still sending
                ended = True
        assert ended and time.time() - t < 6
        assert not got or got.startswith(b"HTTP/1.1 408"), got[:200]


def test_an_idle_keep_alive_connection_is_closed(guarded):
    port, _ = guarded
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.settimeout(5)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        assert closed_within(sock, 4)[0]


def test_a_prompt_client_is_served_whole(guarded):
    port, _ = guarded
    with socket.create_connection(("127.0.0.1", port)) as sock:
        body = b"x" * 200_000
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        sock.settimeout(5)
        reply = sock.recv(65536)
        assert reply.startswith(b"HTTP/1.1 200") and b'"bytes":200000' in reply


def test_tune_sets_the_options_a_running_server_reads_per_connection():
    config = uvicorn.Config(lambda scope, receive, send: None)
    tune(config, LIMITS)
    assert (config.timeout_keep_alive, config.limit_concurrency) == (1, 64)


def test_the_access_log_never_shows_a_query_string(guarded, caplog):
    port, _ = guarded
    access = logging.getLogger("uvicorn.access")
    scrub = ScrubQuery()
    access.addFilter(scrub)
    access.setLevel(logging.INFO)
    try:
        with caplog.at_level(logging.INFO, logger="uvicorn.access"):
            with socket.create_connection(("127.0.0.1", port)) as sock:
                sock.sendall(b"GET /echo?api_key=sekret-in-query HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                sock.settimeout(5)
                assert sock.recv(65536).startswith(b"HTTP/1.1 200")
            time.sleep(0.2)
    finally:
        access.removeFilter(scrub)
    lines = [r.getMessage() for r in caplog.records if r.name == "uvicorn.access"]
    assert (
        lines and all("sekret" not in line for line in lines) and any("/echo?[query removed]" in line for line in lines)
    )
