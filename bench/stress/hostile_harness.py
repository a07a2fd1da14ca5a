"""What every hostile case runs on (bench/stress/hostile.py): the server it starts, the Watch that measures /healthz
latency and RSS while a case runs, a timed POST and filler text. Apart from the cases, so each case module
builds on the same measurements."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: offline.py and the shared modules
from offline import ROOT  # first: the repository importable, the Hub off

# isort: split

import httpx
from servers import Server, blink_serve

MB = 2**20
QUESTION = {"type": "noul", "instructions": "Is this about the weather?"}
SECRET = "hostile-secret-in-query-0123"


class Wire:
    """How the decision cases ask a decision: on System One (`state`, `assets`) or on Gemini's decisions wire
    (`input` as text or parts, `models/` names). `hostile.py --wire` picks one (`use_wire`); the cases read it."""

    def __init__(self, path: str, state_key: str, fixed: dict, overloaded: int):
        self.path, self.state_key, self.fixed = path, state_key, fixed
        self.overloaded = overloaded  # the status a full server answers on this wire (with Retry-After)

    def body(self, state, questions: dict | None = None) -> dict:
        return {**self.fixed, self.state_key: state, "questions": questions or {"q": QUESTION}}

    def raw(self, state_json: bytes) -> bytes:
        """A body whose state is `state_json` as it is (bytes a JSON encoder would never write)."""
        head = b"".join(f'"{k}": {json.dumps(v)}, '.encode() for k, v in self.fixed.items())
        return (
            b"{"
            + head
            + f'"{self.state_key}": '.encode()
            + state_json
            + b', "questions": {"q": '
            + (json.dumps(QUESTION).encode() + b"}}")
        )

    def images(self, pngs: list[bytes]) -> dict:
        data = [base64.b64encode(png).decode() for png in pngs]
        if self.state_key == "input":
            parts = [{"type": "image", "mime_type": "image/png", "data": d} for d in data]
            return self.body([{"type": "text", "text": "Look:"}, *parts])
        assets = {f"<img{i}>": {"type": "image", "format": "png", "data_base64": d} for i, d in enumerate(data)}
        return {**self.body("Look: " + " ".join(assets)), "assets": assets}


WIRES = {
    "systemone": Wire("/v1/systemone", "state", {}, 529),
    "gemini": Wire("/v1beta/decisions", "input", {"model": "models/demo"}, 429),
}
WIRE = [WIRES["systemone"]]


def use_wire(name: str) -> None:
    WIRE[0] = WIRES[name]


def wire() -> Wire:
    return WIRE[0]


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
    """While a case runs: /healthz latency (worst), polled from a process of its own (bench/stress/poll_healthz.py), so
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
            [sys.executable, str(ROOT / "bench" / "stress" / "poll_healthz.py"), server.url],
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
