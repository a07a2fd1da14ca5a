"""What more than one test file (or a benchmark) uses, in one place; no test file imports another.

- servers on loopback: `free_port`, `server_env`, `launch`, `wait_healthy`, `stop_group`, `running`,
  `blink_serve`, `SERVERS` (servers stopped after their fixture's last test), and `Served` (a real app on an
  in-process uvicorn); `rss`, `Watch` and `watching` (a server's memory and /healthz while a request runs;
  bench/hostile.py builds on Watch), `ServerProcess` (a `blink serve` by its URL: pid, log);
- request and answer helpers: `random_request`, `probabilities`, `worst`, `uncached`, `png`, `text_of`, `MB`;
- wire contracts: `UNROUTED`, `ROOT_UNROUTED` and `check_unrouted` (unknown paths and methods), `run_jevcompat` and
  `assert_all_pass` (the conformance suite);
- clients: `mcp_call` (one MCP session), `bearer`, `form_args` and `example_form` (the UI's Decide event, as the
  page sends it), `npm_installed` and `node_script` (the JS clients of ci/js, installed from its lock when they are
  not all there).

The scripted stand-in network for chat (`ScriptedModel`, its tools and scripts) imports torch, so it lives in
helpers/scripted.py; this module imports neither torch nor blink.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[3]
ARTIFACTS = ROOT / "ci" / "artifacts"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


# --- servers on loopback --------------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_env(demo_root: Path, extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BLINK_")}
    env.update(
        {
            "BLINK_DEMO_DIR": str(demo_root),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_VERBOSITY": "error",
            "PYTHONPATH": str(ROOT),
        }
    )
    env.update(extra or {})
    return env


def launch(argv: list[str], port: int, env: dict, log: Path, cwd=None) -> subprocess.Popen:
    """A server process (`{port}` in `argv` becomes `port`), its output in `log`, in its own session: stopping it
    (stop_group) stops what it forked too (ZeroGPU's worker processes)."""
    argv = [a.replace("{port}", str(port)) for a in argv]
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as fh:
        return subprocess.Popen(
            argv, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=cwd or ROOT, start_new_session=True
        )


def wait_healthy(url: str, proc: subprocess.Popen, log: Path, timeout: float = 300, path: str = "/healthz") -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        try:
            if httpx.get(url + path, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"server not healthy after {timeout}s:\n{log.read_text()[-4000:]}")


def start_scripted(name: str, *flags: str, log_dir: Path | None = None) -> tuple[str, subprocess.Popen]:
    """A scripted vLLM replica (ci/tests/scripted_vllm.py, vLLM's wire) on a free loopback port with `flags`,
    answering `/health`: (its URL, its process). Stop it with `stop_group`."""
    port = free_port()
    argv = [sys.executable, str(ROOT / "ci" / "tests" / "scripted_vllm.py"), "--port", str(port), *flags]
    log = (log_dir or ARTIFACTS) / f"scripted-{name}-{port}.log"
    url, proc = f"http://127.0.0.1:{port}", launch(argv, port, dict(os.environ), log)
    wait_healthy(url, proc, log, timeout=30, path="/health")
    return url, proc


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM the server's whole process group, then SIGKILL whatever is left of it."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # forked children that outlived their parent
    except ProcessLookupError:
        pass
    proc.wait(timeout=15)


@contextmanager
def running(
    argv: list[str], demo_root: Path, env: dict | None = None, port: int | None = None, cwd=None, name: str = "server"
):
    """Run a server process on a free loopback port; yield its base URL; stop it afterwards."""
    port = port or free_port()
    log = ARTIFACTS / f"{name}-{port}.log"
    full_env = server_env(demo_root, env)
    full_env.setdefault("GRADIO_SERVER_PORT", str(port))
    proc = launch(argv, port, full_env, log, cwd)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, log)
        yield url
    finally:
        stop_group(proc)


class ServersInUse:
    """Servers held by fixtures (session- or module-scoped) and stopped after the last test that uses their
    fixture (directly or through another fixture), not when pytest tears the fixture down: a session server no
    later test calls, or one of a module's three Spaces, stops running beside the next one. conftest.py calls
    `release_after` once each test is torn down; the fixture's own teardown calls `stop` (a no-op by then)."""

    def __init__(self):
        self.stacks: dict[str, ExitStack] = {}

    def start(self, fixture: str, server) -> str:
        """Enter `server` (a context manager yielding its URL, as `running`) for the fixture named `fixture`."""
        stack = ExitStack()
        url = stack.enter_context(server)
        self.stacks[fixture] = stack
        return url

    def stop(self, fixture: str) -> None:
        stack = self.stacks.pop(fixture, None)
        if stack is not None:
            stack.close()

    def release_after(self, remaining) -> None:
        """Stop every server whose fixture none of the `remaining` tests uses."""
        for fixture in list(self.stacks):
            if not any(fixture in item.fixturenames for item in remaining):
                self.stop(fixture)


SERVERS = ServersInUse()


def blink_serve(*flags: str, model: str = "demo") -> list[str]:
    return [sys.executable, "-m", "blink", "serve", "--model", model, "--port", "{port}", *flags]


class Served:
    """An ASGI app (blink.server.create_app's) on uvicorn in a thread of this process, on a free loopback port."""

    def __init__(self, app):
        import uvicorn

        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.time() + 30
        while not self.server.started:
            assert time.time() < deadline, "uvicorn did not start"
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self):
        self.server.should_exit = True
        self.thread.join(timeout=10)


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


# --- requests and answers -------------------------------------------------------------------------------------------
MB = 2**20
WORDS = "order refund parcel late broken screen billing charge twice angry calm please today account".split()


def random_request(rng: random.Random, n_questions: int) -> dict:
    state = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 400)))
    if rng.random() < 0.5:
        state = {"ticket": state, "meta": {"priority": rng.randint(1, 5)}}
    questions = {}
    for i in range(n_questions):
        instructions = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 40)))
        kind = rng.choice(["noul", "choice", "score"])
        if kind == "noul":
            questions[f"q{i}"] = {"type": "noul", "instructions": instructions}
        elif kind == "choice":
            n = rng.choice([2, 3, 7, 26, 40])
            questions[f"q{i}"] = {
                "type": "choice",
                "instructions": instructions,
                "criteria": {f"{rng.choice(WORDS)}-{j}": None for j in range(n)},
            }
        else:
            questions[f"q{i}"] = {
                "type": "score",
                "instructions": instructions,
                "criteria": [rng.choice(WORDS) for _ in range(rng.randint(2, 10))],
            }
    return {"state": state, "questions": questions}


def probabilities(value) -> list[float]:
    """Every number in the answers (probabilities, confidences), in order."""
    if isinstance(value, dict):
        return [x for v in value.values() for x in probabilities(v)]
    if isinstance(value, list):
        return [x for v in value for x in probabilities(v)]
    return [float(value)] if isinstance(value, (int, float)) and not isinstance(value, bool) else []


def worst(a: dict, b: dict) -> float:
    """The largest difference between two answers' numbers (which must be as many, and some)."""
    pa, pb = probabilities(a), probabilities(b)
    assert len(pa) == len(pb) and pa
    return max(abs(x - y) for x, y in zip(pa, pb))


def uncached(body: dict) -> dict:
    """A System One body without the prefix-state cache's note (`usage.x_cached_tokens`): a state asked again is
    served from the cache and says so; its answers, and everything else, are the same."""
    usage = {k: v for k, v in body.get("usage", {}).items() if k != "x_cached_tokens"}
    return {**body, "usage": usage}


def text_of(n: int) -> str:
    """`n` characters of plain English."""
    unit = "The quick brown fox jumps over the lazy dog near the river bank. "
    return (unit * (n // len(unit) + 1))[:n]


def png(color=(200, 30, 30), size=(300, 200), noise=False) -> bytes:
    import io

    from PIL import Image

    image = Image.new("RGB", size, color)
    if noise:  # incompressible, so the body is large
        image = Image.frombytes("RGB", size, random.Random(0).randbytes(size[0] * size[1] * 3))
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


# --- wire contracts -------------------------------------------------------------------------------------------------
UNROUTED = [
    ("GET", "/v1/nothing-here", 404),
    ("POST", "/v1/embeddings", 404),
    ("GET", "/v1/responses", 405),
    ("GET", "/v1/chat/completions", 405),
    ("DELETE", "/v1/models", 405),
    ("GET", "/v1/systemone", 405),
    ("POST", "/v1/systemone/batch", 404),
    ("POST", "/v2/nothing-here", 404),  # not /v1/, but no Gradio path either: the Space answers it too
]
# outside /v1/ on the standalone server (the root is Gradio's on the Space)
ROOT_UNROUTED = [
    ("GET", "/", 404),
    ("POST", "/nothing-here", 404),
    ("GET", "/v2/nothing-here", 404),
    ("POST", "/healthz", 405),
    ("PUT", "/mcp", 405),
]


def check_unrouted(r: httpx.Response, path: str, status: int) -> None:
    """An unknown path or method (under /v1/, or anywhere on the standalone server): the wire's own error shape,
    with a request id."""
    assert r.status_code == status and r.headers["x-typesafe-request-id"].startswith("req_")
    body = r.json()
    if path.startswith("/v1/systemone"):
        assert isinstance(body["error"], str) and body["detail"]["error_type"] == "not_found_error"
    else:
        assert body["error"]["type"] == "invalid_request_error" and path in body["error"]["message"]
        assert r.headers["x-request-id"] == r.headers["x-typesafe-request-id"]
    if status == 405:
        assert r.headers["allow"] and r.request.method not in r.headers["allow"]


def run_jevcompat(url: str, *extra: str) -> dict:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    report = ARTIFACTS / f"jevcompat{'-key' if extra else ''}.json"
    exe = shutil.which("jevcompat", path=str(Path(sys.executable).parent)) or "jevcompat"
    proc = subprocess.run(
        [exe, "test", url, "--json", str(report), *extra], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return json.loads(report.read_text())


def assert_all_pass(report: dict, skipped_ok: set[str]) -> None:
    failed = {
        r["id"]: r["reason"] or r["findings"]
        for r in report["results"]
        if r["status"] not in ("pass",) and r["id"] not in skipped_ok
    }
    assert not failed, failed
    assert not report["aborted"]


# --- clients --------------------------------------------------------------------------------------------------------
def mcp_call(endpoint: str, work, headers: dict | None = None):
    """One MCP session (the `mcp` client over streamable HTTP) with the server at `endpoint` (the MCP route's full
    URL): initialize, then `await work(session)`; its result."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client

    async def session():
        async with streamablehttp_client(endpoint, headers=headers) as (read, write, _):
            async with ClientSession(read, write) as mcp:
                await mcp.initialize()
                return await work(mcp)

    return asyncio.run(session())


JS = ROOT / "ci" / "js"


def npm_installed(folder: Path = JS, timeout: float = 300) -> Path:
    """`folder`, after `npm ci` there unless every dependency its package.json pins is installed at that version (a
    node_modules from before a dependency was added or bumped is brought up to the lock)."""
    wanted = json.loads((folder / "package.json").read_text())["dependencies"]

    def installed(name: str, version: str) -> bool:
        found = folder / "node_modules" / name / "package.json"
        return found.is_file() and json.loads(found.read_text()).get("version") == version

    if not all(installed(name, version) for name, version in wanted.items()):
        npm = shutil.which("npm") or "npm"
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=folder, check=True, timeout=timeout)
    return folder


CHROMEDRIVER = "/usr/bin/chromedriver"


@contextmanager
def headless_chromium():
    """A headless Chromium driven by selenium, closed on exit (ci/browser-setup.sh installs chromium,
    chromium-driver and selenium when they are missing)."""
    try:
        import selenium  # noqa: F401

        have_selenium = True
    except ImportError:
        have_selenium = False
    if not (have_selenium and shutil.which("chromium") and os.path.exists(CHROMEDRIVER)):
        subprocess.run(["bash", str(ROOT / "ci" / "browser-setup.sh")], check=True, timeout=900)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-dev-shm-usage",
        "--window-size=1400,1800",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def node_script(script: str, *args: str, timeout: float = 300) -> dict:
    """Runs ci/js/`script` with `args` under node (installing ci/js first when needed) and returns the one JSON line
    it prints last."""
    run = subprocess.run(["node", script, *args], cwd=npm_installed(), capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def bearer(key: str | None) -> dict | None:
    """The Authorization header for `key` (None: no header)."""
    return {"Authorization": f"Bearer {key}"} if key else None


def slots(*questions) -> list:
    """The Decide event's 16 question-slot inputs: the given (id, type, instructions, options), then blanks."""
    out = [v for q in questions for v in q]
    for i in range(len(questions), 4):
        out += [f"q{i + 1}", "noul", "", ""]
    return out


def form_args(state: str, *questions, calibration: str = "default") -> list:
    """The UI's Decide event's 19 inputs, as the page sends them: the state, the number of questions shown, the
    four question slots (`questions` are (id, type, instructions, options) tuples; the rest are blanks) and the
    Calibration menu (`default`: the Space's default, no `x_calibration` sent; else the value it sends)."""
    return [state, len(questions), *slots(*questions), calibration]


def example_form(values: list, calibration: str = "default") -> list:
    """A one-click example's form as the Decide event's 19 inputs: what its event fills the form with (its values,
    gradio_page.values_only, less the cleared answers that follow them) and the Calibration menu."""
    return [*values[: 2 + 4 * 4], calibration]


def check_resumes_share_and_keep_saved_states(on, off, rng: random.Random) -> None:
    """Engines over one model, the prefix cache on and off: a state resumed several times, its suffixes cut into
    several passes (so the prefix's tensors are shared by reordered copies of its structure), answers as the
    uncached engine does, and leaves every saved tensor bit for bit as it was; `reorder_cache` replaces every
    tensor of a cache (what sharing them rests on)."""
    import torch

    from blink.executor.prefix_cache import layer_tensors, shared_structure

    body = random_request(rng, 3)
    on.decide(body)  # the state is saved
    entries = on.executor.prefix_cache.entries
    before = {key: [t.clone() for _, _, t in layer_tensors(entry.cache)] for key, entry in entries.items()}
    rows = on.executor.max_rows
    on.executor.max_rows = 2  # several suffix passes: every one but the last reorders a shared copy
    try:
        for _ in range(3):
            again = {**body, "questions": random_request(rng, 5)["questions"]}
            prepared = on.prepare(again)
            (a,), (b,) = on.score([prepared.prompts]), off.score([prepared.prompts])
            assert a.cached_tokens > 0
            assert worst(on.answer(prepared, a.result()), off.answer(prepared, b.result())) <= 1e-6
    finally:
        on.executor.max_rows = rows
    for key, tensors in before.items():
        assert all(torch.equal(x, y) for x, y in zip(tensors, (t for _, _, t in layer_tensors(entries[key].cache))))
    saved = next(iter(entries.values())).cache
    copy = shared_structure(saved)
    copy.reorder_cache(torch.tensor([0, 0]))
    assert not {id(t) for _, _, t in layer_tensors(copy)} & {id(t) for _, _, t in layer_tensors(saved)}
