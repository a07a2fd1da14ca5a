"""Each vLLM replica's circuit breaker and background health (blink/vllm/circuit.py, replicas.py), with scripted
replicas (ci/tests/scripted_vllm.py) behind a real `python -m blink serve --engine vllm`: a replica that answers
`/health` 200 while failing every real request (HTTP 500) is opened by those failures and stays open, whatever its
`/health` says, until a half-open trial request succeeds; `/healthz` reads the states and asks no replica; the
states and transitions show in `/healthz` and `/metrics`."""

from __future__ import annotations

import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from blink.vllm.circuit import CLOSED, HALF_OPEN, OPEN, Circuit
from helpers import blink_serve, body, running, start_scripted, stop_group

INTERVAL_S = 0.5  # --engine-health-interval-s: the background checks, fast for the test


def test_the_circuit_opens_on_failures_in_a_row_and_closes_only_on_a_success():
    c = Circuit(threshold=3, backoff_s=1.0, max_backoff_s=4.0)
    assert c.failed(at_once=False, now=0) is None and c.failed(at_once=False, now=0) is None
    assert c.succeeded() is None and c.failures == 0  # a success in between: the count starts again
    for _ in range(2):
        c.failed(at_once=False, now=0)
    assert c.failed(at_once=False, now=0) == OPEN and c.open_until == 1.0
    assert not c.trial_due(0.5) and c.trial_due(1.0)
    assert c.half_open() == HALF_OPEN
    assert c.open(now=1.0) == OPEN and c.open_until == 3.0  # the trial failed: twice as long
    c.half_open()
    assert c.open(now=3.0) == OPEN and c.open_until == 7.0  # capped at max_backoff_s
    assert c.succeeded() == CLOSED and c.openings == 0
    assert c.failed(at_once=True, now=10) == OPEN and c.open_until == 11.0  # unreachable: at once, from 1 s again
    assert c.transitions == {CLOSED: 1, OPEN: 4, HALF_OPEN: 2}


def replica_rows(url: str) -> dict:
    return {r["url"]: r for r in httpx.get(url + "/healthz", timeout=30).json()["vllm"]["replicas"]}


def script(replica: str, **changes) -> dict:
    if changes:
        return httpx.post(replica + "/script", json=changes, timeout=10).json()
    return httpx.get(replica + "/script", timeout=10).json()


def replica_metrics(url: str, replica: str) -> dict:
    text = httpx.get(url + "/metrics", timeout=30).text
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.labels.get("replica") == replica and "state" in s.labels:
                out[(s.name, s.labels["state"])] = s.value
    return out


def test_a_replica_failing_real_requests_stays_open_until_a_trial_succeeds(demo_root):
    good_url, good = start_scripted("circuit-good", "--delay-ms", "5")
    bad_url, bad = start_scripted("circuit-bad", "--delay-ms", "5", "--fail-status", "500")
    try:
        flags = ("--engine", "vllm", "--engine-url", f"{good_url},{bad_url}")
        flags += ("--engine-health-interval-s", str(INTERVAL_S))
        with running(blink_serve(*flags), demo_root, name="serve-circuit") as url:
            with httpx.Client(base_url=url, timeout=60) as http:
                for i in range(40):  # about half of them go to the failing replica first: retried on the good one
                    r = http.post("/v1/systemone", json=body(i))
                    assert r.status_code == 200, r.text
            rows = replica_rows(url)
            assert rows[bad_url]["circuit"] in (OPEN, HALF_OPEN) and rows[bad_url]["served"] == 0, rows[bad_url]
            assert rows[bad_url]["transitions"][OPEN] >= 1 and rows[good_url]["circuit"] == CLOSED
            time.sleep(8 * INTERVAL_S)  # /health answers 200 all along: the failing trials keep it open
            rows = replica_rows(url)
            assert rows[bad_url]["circuit"] != CLOSED and rows[bad_url]["transitions"][CLOSED] == 0, rows[bad_url]
            assert rows[bad_url]["transitions"][HALF_OPEN] >= 1  # trials were sent, and failed
            assert "trial" in (rows[bad_url]["last_error"] or ""), rows[bad_url]
            seen = replica_metrics(url, bad_url)
            assert seen[("blink_replica_state", OPEN)] + seen[("blink_replica_state", HALF_OPEN)] == 1, seen
            assert seen[("blink_replica_transitions_total", OPEN)] >= 1, seen

            script(bad_url, fail_status=None)  # its engine recovers: the next trial closes it
            deadline = time.monotonic() + 30
            while replica_rows(url)[bad_url]["circuit"] != CLOSED and time.monotonic() < deadline:
                time.sleep(0.2)
            rows = replica_rows(url)
            assert rows[bad_url]["circuit"] == CLOSED and rows[bad_url]["transitions"][CLOSED] == 1, rows[bad_url]
            with httpx.Client(base_url=url, timeout=60) as http:
                for i in range(100, 120):
                    assert http.post("/v1/systemone", json=body(i)).status_code == 200
            assert replica_rows(url)[bad_url]["served"] >= 1  # routed to again
            assert replica_metrics(url, bad_url)[("blink_replica_state", CLOSED)] == 1
    finally:
        stop_group(good)
        stop_group(bad)


def test_healthz_reads_the_states_and_asks_no_replica(demo_root):
    replica_url, replica = start_scripted("healthz-reads", "--delay-ms", "5")
    try:
        flags = ("--engine", "vllm", "--engine-url", replica_url, "--engine-health-interval-s", "2")
        with running(blink_serve(*flags), demo_root, name="serve-healthz-reads") as url:
            before, started = script(replica_url)["health"], time.monotonic()
            with httpx.Client(base_url=url, timeout=30) as http:
                for _ in range(100):
                    assert http.get("/healthz").status_code == 200
            elapsed = time.monotonic() - started
            asked = script(replica_url)["health"] - before
        assert asked <= elapsed / 2 + 2, (asked, elapsed)  # the background check's pace, not one per /healthz
    finally:
        stop_group(replica)
