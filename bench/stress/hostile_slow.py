"""The slow-clients case (bench/stress/hostile.py runs it): hundreds of idle, slowloris, short-body and stalled-upload
connections held open against one server, and how many of them it still holds after a while. Apart from the
one-request cases: it measures connections, not requests."""

from __future__ import annotations

import json
import socket
import time

from hostile_harness import MB, Watch, wire
from servers import Server


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

    post = f"POST {wire().path} HTTP/1.1\r\n".encode()
    for _ in range(500):
        groups["idle"].append(connect())
    for _ in range(100):
        sock = connect()
        sock.sendall(post + b"Host: x\r\n")
        groups["slowloris"].append(sock)
    for _ in range(50):
        sock = connect()
        sock.sendall(
            post + b"Host: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000\r\n\r\n" + f'{{"{wire().state_key}": '.encode()
        )
        groups["short_body"].append(sock)
    chunk = b"x" * MB
    for _ in range(40):
        sock = connect()
        sock.sendall(
            post + b"Host: x\r\nContent-Type: application/json\r\n" + f"Content-Length: {15 * MB + 1}\r\n\r\n".encode()
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
