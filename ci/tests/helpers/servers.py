"""Servers on loopback, for the tests and the benchmarks: the repository's paths, the offline environment, a free
port, launching a server process and waiting for it to be healthy, stopping its process group, `running` (the
context manager most fixtures use), `SERVERS` (servers stopped after their fixture's last test), `blink_serve`
and `Served` (a real app on an in-process uvicorn)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
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
    `release_after` once each test is torn down; the fixture's own teardown calls `stop` (a no-op by then).

    A server started with `again` (a pytest-xdist worker may stop one that a file it gets later uses: conftest.py's
    `still_to_run`) is started again on its old port by `wake` before a test that uses its fixture, so the URL
    pytest keeps for the fixture stays right."""

    def __init__(self):
        self.stacks: dict[str, ExitStack] = {}
        self.again: dict[str, tuple] = {}  # fixture -> (again, its URL) for the servers that can start again
        self.asleep: set[str] = set()

    def start(self, fixture: str, server, again=None) -> str:
        """Enter `server` (a context manager yielding its URL, as `running`) for the fixture named `fixture`;
        `again(port)`: the same server on `port`, for `wake`."""
        stack = ExitStack()
        url = stack.enter_context(server)
        self.stacks[fixture] = stack
        if again is not None:
            self.again[fixture] = (again, url)
        return url

    def stop(self, fixture: str) -> None:
        """The fixture's own teardown: stopped for good."""
        self._close(fixture)
        self.again.pop(fixture, None)
        self.asleep.discard(fixture)

    def _close(self, fixture: str) -> None:
        stack = self.stacks.pop(fixture, None)
        if stack is not None:
            stack.close()

    def release_after(self, remaining) -> None:
        """Stop every server whose fixture none of the `remaining` tests uses."""
        for fixture in list(self.stacks):
            if not any(fixture in item.fixturenames for item in remaining):
                self._close(fixture)
                if fixture in self.again:
                    self.asleep.add(fixture)

    def wake(self, fixturenames) -> None:
        """Start again, on their old ports, the stopped servers whose fixtures a test is about to use."""
        for fixture in [f for f in self.asleep if f in fixturenames]:
            again, url = self.again[fixture]
            stack = ExitStack()
            stack.enter_context(again(int(url.rsplit(":", 1)[1])))
            self.stacks[fixture] = stack
            self.asleep.discard(fixture)


SERVERS = ServersInUse()


ORIGIN = "https://app.example"  # the one origin conftest.py's `surface` server lets in (CORS)


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
