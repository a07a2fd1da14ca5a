"""A short soak of the Space (`python app.py`, the demo model on CPU, default settings but a 5 s chat-slot wait;
the 512 MiB prefix-state cache on): bench/stress/soak.py's mixed traffic (decisions small and long, chat streams,
clients that leave early, hostile bodies) at a rate a loaded 2-core machine keeps up with, for a little over a minute.
After a warm-up, with the traffic drained each time: file descriptors and threads back where they were (a small
tolerance), RSS grown by no more than the prefix cache's own counted growth plus a loose 100 MB, no 5xx and no
transport error. The 20-minute soak at 80 % of capacity is bench/stress/soak.py's (bench/RESULTS.md)."""

from __future__ import annotations

import asyncio
import sys
import time

import httpx
import psutil
import pytest

from helpers import ARTIFACTS, ROOT, free_port, launch, server_env, stop_group, wait_healthy

pytestmark = [pytest.mark.e2e, pytest.mark.space, pytest.mark.slow]

sys.path.insert(0, str(ROOT / "bench" / "stress"))
import soak  # noqa: E402 - bench/stress/soak.py's traffic and samples, the same as the long soak's

RATE = 4.0  # arrivals a second: a fifth of what the Space answers on a quiet 2-core machine
WARM_S, SOAK_S = 10.0, 60.0
FD_SLACK, THREAD_SLACK, RSS_SLACK_MB = 8, 4, 100.0


@pytest.fixture(scope="module")
def space_process(demo_root):
    port = free_port()
    # a chat that finds every slot taken is answered 529 after 5 s, not 30: the drains stay short
    extra = {"BLINK_MODEL": "demo", "GRADIO_SERVER_PORT": str(port), "BLINK_CHAT_SLOT_WAIT_S": "5"}
    env = server_env(demo_root, extra)
    log = ARTIFACTS / f"space-soak-{port}.log"
    proc = launch([sys.executable, str(ROOT / "app.py")], port, env, log)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, log)
        yield url, port, proc.pid
    finally:
        stop_group(proc)


def quiet_sample(sampler: soak.Sampler, baseline: dict | None = None) -> dict:
    """A sample once the traffic has drained: the server's connections close a moment after the client's, so
    wait (up to 15 s) for the counts to come back within the slack before taking the last one."""
    deadline = time.monotonic() + 15
    while True:
        sampler.sample(0)
        row = sampler.rows[-1]
        settled = baseline is None or (
            row["fds"] <= baseline["fds"] + FD_SLACK and row["threads"] <= baseline["threads"] + THREAD_SLACK
        )
        if settled or time.monotonic() > deadline:
            return row
        time.sleep(1)


def test_a_short_soak_leaves_fds_threads_and_memory_flat(space_process):
    url, port, pid = space_process
    model = httpx.get(url + "/v1/models", timeout=30).json()["data"][0]["id"]
    sampler = soak.Sampler(pid, url)
    warm = asyncio.run(soak.soak(url, port, RATE, WARM_S, None, model))
    time.sleep(2)
    before = quiet_sample(sampler)
    run = asyncio.run(soak.soak(url, port, RATE, SOAK_S, sampler, model))
    after = quiet_sample(sampler, before)
    statuses = {**warm["statuses"]}
    for kind, n in run["statuses"].items():
        statuses[kind] = statuses.get(kind, 0) + n
    summary = f"before {before}, after {after}, statuses {statuses}"
    failed = {k: n for k, n in statuses.items() if k.split()[-1].startswith("5") and not k.endswith(" 529")}
    transport = {k: n for k, n in statuses.items() if not k.split()[-1].isdigit() and k != "left"}
    assert not failed and not transport, summary
    assert run["statuses"].get("decision 200", 0) >= SOAK_S * RATE * 0.5, summary
    assert {k.split()[-1] for k in statuses if k.startswith("hostile")} <= {"413", "422"}, summary
    assert after["fds"] <= before["fds"] + FD_SLACK, summary
    assert after["threads"] <= before["threads"] + THREAD_SLACK, summary
    cache_growth = after["cache_mb"] - before["cache_mb"]
    assert after["rss_mb"] - before["rss_mb"] <= cache_growth + RSS_SLACK_MB, summary
    assert max(row["rss_mb"] for row in sampler.rows) <= before["rss_mb"] + cache_growth + 2 * RSS_SLACK_MB, summary
    assert psutil.Process(pid).is_running()
