"""A running server watched from outside: its resident memory (`rss`), the `Watch` that samples it and /healthz
latency while a request runs, and `ServerProcess` (a `blink serve` found by its URL: pid, log). Apart from
starting servers: these only observe one that runs."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from helpers.servers import ARTIFACTS


def rss(pid: int) -> int:
    """A process's resident memory in bytes (from /proc; 0 once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:  # the server is gone: the test that needed it fails on its own terms
        pass
    return 0


class Watch:
    """While a request runs: the worst /healthz latency of the server at `url` and the peak of `rss()`, each
    sampled in its own thread (RSS every 20 ms, /healthz every 50 ms, a failed /healthz counted)."""

    def __init__(self, url: str, rss: Callable[[], int], health_timeout: float = 30):
        self.url, self.rss, self.health_timeout = url, rss, health_timeout
        self.base = rss()
        self.peak, self.health_max, self.health_fail = self.base, 0.0, 0
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._rss, daemon=True),
            threading.Thread(target=self._health, daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _rss(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.rss())
            self._stop.wait(0.02)

    def _health(self) -> None:
        with httpx.Client(timeout=self.health_timeout) as client:
            while not self._stop.is_set():
                t = time.perf_counter()
                try:
                    client.get(self.url + "/healthz")
                except httpx.HTTPError:
                    self.health_fail += 1
                self.health_max = max(self.health_max, time.perf_counter() - t)
                self._stop.wait(0.05)

    def done(self, settle_s: float = 1.0) -> tuple[float, int, int]:
        """Stop sampling; after `settle_s` (what the server gives back, it gives back soon): the worst /healthz
        seconds, the RSS peak over the base and the RSS kept over the base, in bytes."""
        self._stop.set()
        for t in self._threads:
            t.join(timeout=self.health_timeout + 5)
        time.sleep(settle_s)
        return self.health_max, self.peak - self.base, self.rss() - self.base


def pid_on_port(port: int) -> int:
    """The `blink serve` process listening on `port` (found from /proc, no extra dependency)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if (
                b"blink" in argv
                and b"serve" in argv
                and b"--port" in argv
                and argv[argv.index(b"--port") + 1 : argv.index(b"--port") + 2] == [str(port).encode()]
            ):
                return int(entry.name)
    raise RuntimeError(f"no server process on port {port}")


class ServerProcess:
    """A running `blink serve` by its URL: its port, its process id (for its RSS) and its log."""

    def __init__(self, url: str):
        self.url = url
        self.port = int(url.rsplit(":", 1)[1])
        self.pid = pid_on_port(self.port)

    def log_text(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in ARTIFACTS.glob(f"*-{self.port}.log"))


def watching(server: ServerProcess) -> Watch:
    """/healthz latency (worst) and the server's RSS (peak) while a hostile request runs."""
    return Watch(server.url, lambda: rss(server.pid))
