"""Shared fixtures: the demo model (built once per run, offline) and real servers on loopback.

Servers are real processes (`python -m blink serve ...`), reached over HTTP by real clients.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "ci" / "artifacts"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def demo_root(tmp_path_factory) -> Path:
    """The folder BLINK_DEMO_DIR points at: `--model demo` finds (or builds) `demo-model` inside it."""
    root = Path(os.environ.get("BLINK_TEST_DEMO_ROOT") or tmp_path_factory.mktemp("blink-demo"))
    os.environ["BLINK_DEMO_DIR"] = str(root)
    from blink.demo import demo_model_dir

    demo_model_dir()  # build once for the whole session
    return root


@pytest.fixture(scope="session")
def demo_dir(demo_root) -> Path:
    return demo_root / "demo-model"


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


def blink_serve(*flags: str, model: str = "demo") -> list[str]:
    return [sys.executable, "-m", "blink", "serve", "--model", model, "--port", "{port}", *flags]


@pytest.fixture(scope="session")
def server(demo_root):
    """The standalone server with the demo model, open (no key), batching off."""
    with running(blink_serve(), demo_root, name="serve") as url:
        yield url


@pytest.fixture(scope="session")
def keyed_server(demo_root):
    """The standalone server with an API key."""
    with running(blink_serve(), demo_root, env={"BLINK_API_KEY": "sekret-key-123"}, name="serve-keyed") as url:
        yield url


@pytest.fixture(scope="session")
def engine(demo_dir):
    """The engine in-process (for executor and engine-level checks)."""
    from blink.engine import Engine
    from blink.loading import load

    return Engine(load(str(demo_dir)))


def uncached(body: dict) -> dict:
    """A System One body without the prefix-state cache's note (`usage.x_cached_tokens`): a state asked again is
    served from the cache and says so; its answers, and everything else, are the same."""
    usage = {k: v for k, v in body.get("usage", {}).items() if k != "x_cached_tokens"}
    return {**body, "usage": usage}
