"""Faults that stay local, shown with scripted replicas (ci/tests/scripted_vllm.py: vLLM's wire, a fixed sleep per
request, nothing computed) behind a real `python -m blink serve --engine vllm`: a hung replica (SIGSTOP) holds only
the requests sent to it, which time out and are answered by a live one; the others keep answering meanwhile. A
replica that is shutting down (its answers aborted or cut off) never has a cut-off answer pass for a whole one.
The bench with the figures is bench/scale_out/replicas_sim.py."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import httpx
import pytest

from helpers import blink_serve, body, running, start_scripted, stop_group

ENGINE_TIMEOUT_S = 3.0  # the cap on one call; the hung replica's requests take about this long, then move on


@pytest.fixture
def scripted():
    procs = []
    try:
        for i in range(3):
            procs.append(start_scripted(str(i), "--delay-ms", "50"))
        yield procs
    finally:
        for _, proc in procs:
            try:
                os.kill(proc.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
            stop_group(proc)


def test_a_hung_replica_stalls_nobody_else(demo_root, scripted):
    urls = ",".join(url for url, _ in scripted)
    flags = ("--engine", "vllm", "--engine-url", urls, "--engine-timeout-s", str(ENGINE_TIMEOUT_S))
    with running(blink_serve(*flags), demo_root, name="serve-scripted") as url:
        answered: list[float] = []
        failed: list[str] = []
        stop = threading.Event()

        def client(c: int) -> None:
            with httpx.Client(base_url=url, timeout=60) as http:
                for k in range(2000):  # bounded: the stop event ends it long before
                    if stop.is_set():
                        return
                    try:
                        r = http.post("/v1/systemone", json=body(c * 10_000 + k))
                        (answered.append(time.perf_counter()) if r.status_code == 200 else failed.append(r.text))
                    except httpx.HTTPError as exc:
                        failed.append(type(exc).__name__)

        threads = [threading.Thread(target=client, args=(c,)) for c in range(8)]
        for t in threads:
            t.start()
        try:
            time.sleep(2.0)  # every replica served and measured
            hung = scripted[0][1]
            os.kill(hung.pid, signal.SIGSTOP)
            hang_start = time.perf_counter()
            time.sleep(4 * ENGINE_TIMEOUT_S)
            hang_end = time.perf_counter()
            os.kill(hung.pid, signal.SIGCONT)
            time.sleep(1.0)
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=120)
        replicas = httpx.get(url + "/healthz", timeout=30).json()["vllm"]["replicas"]
    assert not failed, failed[:5]  # nothing lost: the hung replica's requests were answered elsewhere
    during = sorted(t for t in answered if hang_start <= t < hang_end)
    points = [hang_start, *during, hang_end]
    silence = max(b - a for a, b in zip(points, points[1:]))
    # the live replicas kept answering the whole time: never a pause as long as the hung calls' own timeout
    # (one batch at a time, every request would wait behind the hung one's for that long)
    assert len(during) >= 20 and silence < ENGINE_TIMEOUT_S, (len(during), silence)
    assert sum(r["timeouts"] for r in replicas) >= 1  # the hung one's calls timed out and were retried


@pytest.mark.parametrize("fault", ["--abort-after", "--close-after"])
def test_a_cut_off_answer_never_passes_for_a_whole_one(demo_root, fault):
    """A replica being stopped aborts what it has in flight (vLLM: `finish_reason: "abort"`, then `[DONE]`) or
    drops the connection at a clean boundary. A chat stream cut so ends with the wire's error event, never with a
    finish_reason; a decision's read that was aborted is never read as scores: it is retried, and with no other
    replica it is answered 529 with Retry-After."""
    url_r, replica = start_scripted(fault.strip("-"), "--delay-ms", "5", fault, "3")
    try:
        flags = ("--engine", "vllm", "--engine-url", url_r, "--engine-timeout-s", str(ENGINE_TIMEOUT_S))
        with running(blink_serve(*flags), demo_root, name=f"serve-{fault.strip('-')}") as url:
            chat = {
                "model": "demo",
                "messages": [{"role": "user", "content": "Hello"}],
                "max_tokens": 20,
                "stream": True,
            }
            with httpx.stream("POST", url + "/v1/chat/completions", json=chat, timeout=60) as r:
                assert r.status_code == 200, r.read()
                events = [line.removeprefix("data: ") for line in r.iter_lines() if line.startswith("data: ")]
            assert events[-1] == "[DONE]"
            chunks = [json.loads(e) for e in events[:-1]]
            assert "error" in chunks[-1] and chunks[-1]["error"]["type"] == "internal_error", chunks[-1]
            ends = [c["finish_reason"] for chunk in chunks for c in chunk.get("choices", []) if c.get("finish_reason")]
            assert ends == [], ends  # a cut-off answer is not a "length" one

            decision = httpx.post(url + "/v1/systemone", json=body(1), timeout=60)
            if fault == "--abort-after":
                assert decision.status_code == 529 and decision.headers.get("retry-after"), decision.text
            else:  # reads are whole answers: only streams are cut
                assert decision.status_code == 200, decision.text
    finally:
        stop_group(replica)


def test_a_replica_hung_from_the_start_costs_seconds_not_the_default_timeout(demo_root):
    """Default settings (no --engine-timeout-s: its cap stays 300 s), four scripted replicas of 100 ms, one of them
    hung from the start (it answers /health and /v1/models, never a completion), 16 clients from the moment the
    server is up: before anything is measured a call's timeout comes from the assumed speed, so the requests first
    sent to the hung replica move on within seconds. Nothing is lost and no request waits more than 15 s."""
    replicas = [start_scripted(f"first-{i}", "--delay-ms", "100") for i in range(3)]
    replicas.append(start_scripted("first-hung", "--delay-ms", "100", "--hang"))
    try:
        urls = ",".join(url for url, _ in replicas)
        with running(blink_serve("--engine", "vllm", "--engine-url", urls), demo_root, name="serve-first-call") as url:
            waits: list[float] = []
            failed: list[str] = []
            stop_at = time.perf_counter() + 20.0

            clients = [httpx.Client(base_url=url, timeout=60) for _ in range(16)]
            go = threading.Barrier(16)

            def client(c: int) -> None:
                go.wait()  # the 16 first requests at once: sent before any replica is measured
                for k in range(1000):  # bounded: the clock ends it long before
                    if time.perf_counter() > stop_at:
                        return
                    started = time.perf_counter()
                    try:
                        r = clients[c].post("/v1/systemone", json=body(c * 10_000 + k))
                    except httpx.HTTPError as exc:
                        failed.append(type(exc).__name__)
                        continue
                    (waits if r.status_code == 200 else failed).append(time.perf_counter() - started)

            threads = [threading.Thread(target=client, args=(c,)) for c in range(16)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=180)
            for http in clients:
                http.close()
            hung = httpx.get(url + "/healthz", timeout=30).json()["vllm"]["replicas"][3]
    finally:
        for _, proc in replicas:
            stop_group(proc)
    print(f"hung from the start: {len(waits)} answered, the longest in {max(waits, default=0):.2f} s, {hung}")
    assert not failed, failed[:5]
    assert len(waits) >= 100 and max(waits) < 15.0, (len(waits), max(waits))
    assert hung["timeouts"] >= 1 and hung["served"] == 0, hung  # it was sent requests, and they moved on
