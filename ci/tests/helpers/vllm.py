"""Real vLLM replicas and a vllm-router in front of them, for every test (and bench) that needs them.

- `vllm_replicas_running(model_dir)`: builds .venv-vllm (`ci/vllm-venv.sh`; fails loudly, never skips), starts two
  vLLM CPU replicas of `model_dir` side by side (`ci/vllm-serve.sh`, fp32, `-O0`), sends each its first request
  (which compiles its kernels) and yields `[(url, process)]`; stops them after. conftest.py holds them in the
  session-scoped `vllm_replicas` fixture, so test_router.py, test_vllm.py and test_vllm_serve.py share one pair
  (two CPU replicas already fill two cores). Its timings land in `VLLM_TIMING` and, once the replicas are stopped,
  in ci/artifacts/vllm-timing.json.
- `one_more_replica(model_dir, name)`: a third replica of its own, for a test that kills one mid-run.
- `wait_up`: a vLLM process answering `/health`, or its log when it died or took too long.
- `router_running(worker_urls, *flags)`: `vllm-router` (built into .venv-router by `ci/router-venv.sh` when
  missing) on a free loopback port in front of `worker_urls`; yields its URL once it answers `/health`.
- `LONG_STATE` and `DECISIONS` (a long state, every question type, the two-letter labels past Z): what
  test_vllm.py and test_vllm_serve.py send through the replicas; `max_difference`: the largest difference between
  two scores of the same prompts (per prompt, per read, per label).

Imports neither torch nor blink (bench/ uses it too).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx

from helpers import ARTIFACTS, ROOT, free_port, launch, stop_group, wait_healthy

START_TIMEOUT_S = 900  # two replicas side by side on two shared cores
VLLM_TIMING: dict = {}
ROUTER = ROOT / ".venv-router" / "bin" / "vllm-router"


def build_venv(script: str, timeout: float) -> None:
    """Run one of ci/*-venv.sh (idempotent: seconds when the venv is there); its output when it fails."""
    proc = subprocess.run(["bash", script], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{script} failed:\n{proc.stdout[-3000:]}{proc.stderr[-5000:]}"


def wait_up(url: str, proc: subprocess.Popen, log: Path, deadline: float) -> None:
    """A vLLM process answering `/health` by `deadline` (replicas started together share one)."""
    wait_healthy(url, proc, log, timeout=max(0.0, deadline - time.time()), path="/health")


def first_request(url: str, model: str) -> None:
    payload = {"model": model, "prompt": [1, 2, 3], "max_tokens": 1}
    httpx.post(url + "/v1/completions", json=payload, timeout=600).raise_for_status()


def start_replica(model_dir: Path, name: str) -> tuple[str, subprocess.Popen, Path]:
    """One vLLM replica of `model_dir` starting on a free loopback port, fp32: (its URL, its process, its log)."""
    port = free_port()
    log = ARTIFACTS / f"vllm-{name}-{port}.log"
    # blink's own context limit (32,768 tokens a prompt), so vLLM never refuses what blink accepted
    env = {**os.environ, "MAX_MODEL_LEN": "32768"}
    with open(log, "w") as fh:
        # -O0: no torch.compile (starts ~40 s sooner per replica; the same numbers)
        argv = ["bash", "ci/vllm-serve.sh", str(model_dir), str(port), "--dtype", "float32", "-O0"]
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    return f"http://127.0.0.1:{port}", proc, log


@contextmanager
def one_more_replica(model_dir: Path, name: str):
    """A replica of its own beside the session's two (a test may kill it): `(url, process)` once it has answered its
    first request; stopped after."""
    url, proc, log = start_replica(model_dir, name)
    try:
        wait_up(url, proc, log, time.time() + START_TIMEOUT_S)
        first_request(url, str(model_dir))
        yield url, proc
    finally:
        stop_group(proc)


@contextmanager
def vllm_replicas_running(model_dir: Path):
    """Two real vLLM replicas of `model_dir`, fp32 (as the transformers reference), `[(url, process)]`."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    build_venv("ci/vllm-venv.sh", 3600)  # a clean machine: ~6 min
    VLLM_TIMING["venv_s"] = round(time.perf_counter() - started, 1)
    procs = []
    try:
        for name in ("a", "b"):
            procs.append(start_replica(model_dir, name))
        up_from = time.perf_counter()
        deadline = time.time() + START_TIMEOUT_S
        for url, proc, log in procs:
            wait_up(url, proc, log, deadline)
        VLLM_TIMING["replicas_start_s"] = round(time.perf_counter() - up_from, 1)
        first = time.perf_counter()
        with ThreadPoolExecutor(2) as pool:  # each replica's first request compiles its kernels
            list(pool.map(lambda url: first_request(url, str(model_dir)), [url for url, _, _ in procs]))
        VLLM_TIMING["first_request_s"] = round(time.perf_counter() - first, 1)
        yield [(url, proc) for url, proc, _ in procs]
    finally:
        for _, proc, _ in procs:
            stop_group(proc)
        VLLM_TIMING["session_s"] = round(time.perf_counter() - started, 1)
        (ARTIFACTS / "vllm-timing.json").write_text(json.dumps(VLLM_TIMING, indent=1) + "\n")


@contextmanager
def router_running(worker_urls: list[str], *flags: str, log_dir: Path = ARTIFACTS, timeout: float = 120):
    """vllm-router on a free loopback port in front of `worker_urls` with `flags` (its policy, timeouts); its URL.
    Its own Prometheus listener goes on another free port (its default, 29000, would clash between routers)."""
    build_venv("ci/router-venv.sh", 600)
    port = free_port()
    argv = [str(ROUTER), "--host", "127.0.0.1", "--port", str(port), "--worker-urls", *worker_urls]
    argv += ["--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port()), *flags]
    log = log_dir / f"vllm-router-{port}.log"
    proc = launch(argv, port, dict(os.environ), log)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, log, timeout=timeout, path="/health")
        yield url
    finally:
        stop_group(proc)


LONG_STATE = (
    "Order 4471 arrived with a cracked screen. The customer attached photos, says the box was dented, "
    "and wants a replacement before Friday because it is a birthday present. "
) * 6
DECISIONS = [
    {
        "state": "The parcel never arrived and the tracking page has not changed in nine days.",
        "questions": {"late": {"type": "noul", "instructions": "Is the parcel late?"}},
    },
    {
        "state": LONG_STATE,
        "questions": {
            "route": {
                "type": "choice",
                "instructions": "Which team should handle this?",
                "criteria": {
                    "returns": "Damaged or wrong items",
                    "billing": "Charges and refunds",
                    "shipping": "Late or lost parcels",
                },
            },
            "urgent": {"type": "noul", "instructions": "Does this need a reply today?"},
            "tone": {
                "type": "score",
                "instructions": "How upset is the customer?",
                "criteria": ["Calm", "Annoyed", "Angry", "Furious"],
            },
            "gift": {"type": "noul", "instructions": "Is it a present?"},
        },
    },
    # past Z: the two-letter single-token labels
    {
        "state": {"ticket": 19, "text": "Which city should the package go to?"},
        "questions": {
            "city": {
                "type": "choice",
                "instructions": "Pick the city.",
                "criteria": {f"city {i}": None for i in range(40)},
            }
        },
    },
]


def max_difference(a, b) -> float:
    return max(abs(x - y) for pa, pb in zip(a, b) for ra, rb in zip(pa, pb) for x, y in zip(ra, rb))
