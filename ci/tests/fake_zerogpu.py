"""A fake ZeroGPU scheduler (the device API `spaces` talks to: /startup-report, /schedule, /allow, /release)
on loopback, for tests of the Space's ZeroGPU code path. Test code only.

It records every call (durationSeconds, token, allowToken, fail) and answers each /schedule according to
the next mode queued with `answer_next(...)` (default "ok"):

    ok             200 JSON: a GPU is granted at once
    queued         200 text/event-stream: ping, then succeeded
    quota          429 {"left", "wait"}: the caller's quota is spent ("Try again in 1:02:03")
    illegal        429 with a negative wait: the duration is over what the caller may ask
    no_gpu         503: no GPU available
    queue_timeout  200 text/event-stream: ping, then failed
    worker_fail    schedule OK, then /allow answers 500: the forked worker fails before running
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse


class FakeScheduler:
    def __init__(self):
        self.calls: list[dict] = []
        self.modes: list[str] = []
        self.failing_tokens: set[str] = set()
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _send(self, status: int, body: bytes = b"", content_type: str = "application/json", headers=None):
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                if urlparse(self.path).path == "/queue-size":
                    return self._send(200, b"0")
                return self._send(404)

            def do_POST(self):
                url = urlparse(self.path)
                params = {k: v[0] for k, v in parse_qs(url.query).items()}
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                call = {"path": url.path, "params": params, "time": time.time()}
                if url.path == "/schedule":
                    mode = fake._next_mode()
                    call["mode"] = mode
                    allow_token = uuid.uuid4().hex
                    call["allowToken"] = allow_token
                    fake._record(call)
                    # idle=False makes `spaces` fork a fresh worker (which calls /allow) instead of reusing one
                    granted = json.dumps(
                        {
                            "idle": mode != "worker_fail",
                            "nvidiaIndex": 0,
                            "nvidiaUUID": "GPU-fake-0",
                            "allowToken": allow_token,
                        }
                    ).encode()
                    if mode == "ok" or mode == "worker_fail":
                        if mode == "worker_fail":
                            with fake.lock:
                                fake.failing_tokens.add(allow_token)
                        return self._send(200, granted)
                    if mode == "quota":
                        return self._send(
                            429, json.dumps({"left": 7, "wait": 3723}).encode(), headers={"X-Authenticated": "regular"}
                        )
                    if mode == "illegal":
                        return self._send(429, json.dumps({"left": 7, "wait": -1}).encode())
                    if mode == "no_gpu":
                        return self._send(503, b"{}")
                    if mode in ("queued", "queue_timeout"):
                        last = (
                            f"event: succeeded\ndata: {granted.decode()}\n\n"
                            if mode == "queued"
                            else "event: failed\n\n"
                        )
                        self.send_response(200)
                        self.send_header("Content-Type", "text/event-stream")
                        self.send_header("X-Queuing-Reason", "node")
                        self.send_header("Connection", "close")
                        self.end_headers()
                        for chunk in ("event: ping\n\n", last):
                            self.wfile.write(chunk.encode())
                            self.wfile.flush()
                            time.sleep(0.2)
                        self.close_connection = True
                        return
                    raise AssertionError(f"unknown mode {mode}")
                fake._record(call)
                if url.path == "/allow":
                    with fake.lock:
                        failing = params.get("allowToken") in fake.failing_tokens
                    return self._send(500 if failing else 200, b"{}")
                if url.path in ("/startup-report", "/release"):
                    return self._send(200, b"{}")
                return self._send(404)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def _next_mode(self) -> str:
        with self.lock:
            return self.modes.pop(0) if self.modes else "ok"

    def _record(self, call: dict) -> None:
        with self.lock:
            self.calls.append(call)

    # for tests ---------------------------------------------------------------------------------------------
    def answer_next(self, *modes: str) -> None:
        with self.lock:
            self.modes.extend(modes)

    def seen(self, path: str) -> list[dict]:
        with self.lock:
            return [c for c in self.calls if c["path"] == path]

    def mark(self) -> int:
        with self.lock:
            return len(self.calls)

    def since(self, mark: int, path: str | None = None) -> list[dict]:
        with self.lock:
            return [c for c in self.calls[mark:] if path is None or c["path"] == path]

    def wait_for(self, predicate, timeout: float = 30.0):
        deadline = time.time() + timeout
        while time.time() < deadline:
            with self.lock:
                hit = [c for c in self.calls if predicate(c)]
            if hit:
                return hit[0]
            time.sleep(0.05)
        return None
