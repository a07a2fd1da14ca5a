"""The servers the benchmarks measure, started and stopped as the tests start theirs (ci/tests/helpers): a free
loopback port, its own session (stopping it stops what it forked), its log, ready when its health route answers,
with no BLINK_* variable of the caller's leaking in."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from pathlib import Path

import httpx
import offline  # noqa: F401 - first: the repository importable, the Hub off
import psutil

# isort: split

from helpers import blink_serve, free_port, launch, server_env, stop_group, wait_healthy

# where `--model demo` finds (or builds) its model, as blink.model.demo.demo_model_dir looks for it in this process
DEMO_ROOT = Path(os.environ.get("BLINK_DEMO_DIR") or Path.home() / ".cache" / "blink")

__all__ = ["DEMO_ROOT", "Server", "blink_serve", "closed_loop"]


class Server:
    """A server subprocess (`argv` with `{port}`), with its RSS (process tree) sampled while it runs. Call
    `wait_ready()` before using it; `revive()` starts it again if something on the machine ended it."""

    def __init__(self, name: str, argv: list[str], logdir: Path, health: str = "/healthz"):
        self.name, self.health, self.argv, self.logdir = name, health, argv, logdir
        self.ready_rss = 0
        self.peak_rss = 0
        self.restarts = []
        self._launch()
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _launch(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = self.logdir / f"{self.name}-{self.port}.log"
        self.proc = launch(self.argv, self.port, server_env(DEMO_ROOT), self.log)

    def revive(self) -> bool:
        """If the process died (something else on this shared machine may end it), start it again: True."""
        if self.proc.poll() is None:
            return False
        why = f"{self.name} died with return code {self.proc.returncode}; log {self.log}"
        print(f"[servers] {why}; restarting it", file=sys.stderr, flush=True)
        self.restarts.append(why)
        self._launch()
        self.wait_ready()
        return True

    def rss(self) -> int:
        try:
            p = psutil.Process(self.proc.pid)
            return p.memory_info().rss + sum(c.memory_info().rss for c in p.children(recursive=True))
        except psutil.Error:
            return 0

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak_rss = max(self.peak_rss, self.rss())
            self._stop.wait(0.05)

    def wait_ready(self, timeout: float = 300) -> Server:
        wait_healthy(self.url, self.proc, self.log, timeout, path=self.health)
        self.ready_rss = self.rss()
        return self

    def stop(self) -> None:
        self._stop.set()
        stop_group(self.proc)


async def closed_loop(url: str, bodies: list[list[dict]], timeout: float = 900) -> dict:
    """len(bodies) concurrent clients, each sending its own System One requests one after another: req/s of
    the answered ones, and what each failure was (a status, or a transport error's name)."""
    n = len(bodies)
    limits = httpx.Limits(max_connections=n + 4, max_keepalive_connections=n + 4)
    errors = []
    async with httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits) as client:

        async def one(mine: list[dict]) -> None:
            for b in mine:
                try:
                    r = await client.post("/v1/systemone", json=b)
                except httpx.TransportError as exc:
                    errors.append(type(exc).__name__)
                    continue
                if r.status_code != 200:
                    errors.append(r.status_code)

        t = time.perf_counter()
        await asyncio.gather(*(one(mine) for mine in bodies))
        wall = time.perf_counter() - t
    total = sum(len(mine) for mine in bodies)
    return {"rps": (total - len(errors)) / wall, "wall_s": wall, "requests": total, "errors": errors}
