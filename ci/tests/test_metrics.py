"""`GET /metrics` (blink.web.metrics) on a real `python -m blink serve` and on the Space (`python app.py`, where a
knob turns it on): Prometheus' text format as its own parser reads it, vLLM's names where they mean the same, the
counters moving with decisions, chats, a 4xx and a 529, behind the key when one is set, and a hostile client (random
model names, paths, headers, methods) unable to add a series. `promtool check metrics` (from Debian's `prometheus`
package, unpacked by ci/promtool-setup.sh when it is not on PATH) finds nothing but its lint on the `vllm:` colons."""

from __future__ import annotations

import random
import re
import string
import subprocess
import sys
import threading

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from helpers import ROOT, blink_serve, running

KEY = "sk-metrics-7Hq2-key"
# two decisions at a time and no wait for a place: a burst of decisions is partly answered 529
TIGHT = {"BLINK_MAX_QUEUED_REQUESTS": "1", "BLINK_MAX_BATCH_REQUESTS": "1", "BLINK_DECIDE_WAIT_S": "0"}

VLLM = {
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:time_to_first_token_seconds": "histogram",
    "vllm:e2e_request_latency_seconds": "histogram",
    "vllm:prompt_tokens": "counter",
    "vllm:generation_tokens": "counter",
    "vllm:prefix_cache_queries": "counter",
    "vllm:prefix_cache_hits": "counter",
}
BLINK = {
    "blink_decisions": "counter",
    "blink_questions": "counter",
    "blink_options": "counter",
    "blink_chats": "counter",
    "blink_refusals": "counter",
    "blink_admission_wait_seconds": "histogram",
    "blink_admission_held": "gauge",
    "blink_admission_waiting": "gauge",
    "blink_admission_capacity": "gauge",
}
DECISION = {
    "state": "The parcel left the depot on Monday and has not moved since.",
    "questions": {
        "late": {"type": "noul", "instructions": "Is the parcel late?"},
        "where": {"type": "choice", "criteria": {"depot": None, "van": None, "home": None}},
        "worry": {"type": "score", "criteria": ["calm", "uneasy", "alarmed"]},
    },
}


def big(i: int) -> dict:
    return {**DECISION, "state": f"Parcel {i}: " + "it waited at the depot, then moved again. " * 200}


CHAT = {"model": "demo", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4}


def scrape(url: str, key: str | None = None) -> tuple[str, dict]:
    """The text and its families by name (as the parser names them: a counter without `_total`)."""
    r = httpx.get(url + "/metrics", headers={"Authorization": f"Bearer {key}"} if key else {}, timeout=30)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4"), r.headers
    return r.text, {f.name: f for f in text_string_to_metric_families(r.text)}


def value(families: dict, name: str, suffix: str = "", **labels) -> float:
    """The sum of the samples of `name` + `suffix` whose labels include `labels`."""
    family = families[name]
    wanted = name + (suffix or ("_total" if family.type == "counter" else ""))
    return sum(
        s.value for s in family.samples if s.name == wanted and all(s.labels.get(k) == v for k, v in labels.items())
    )


def series(families: dict) -> set:
    return {(s.name, tuple(sorted(s.labels.items()))) for f in families.values() for s in f.samples}


@pytest.fixture(scope="module")
def tight(demo_root):
    with running(blink_serve(), demo_root, env=TIGHT, name="serve-metrics") as url:
        yield url


def test_names_and_types_are_vllms_and_ours(tight):
    _, families = scrape(tight)
    for name, kind in {**VLLM, **BLINK}.items():
        assert name in families, f"{name} missing from /metrics"
        assert families[name].type == kind, (name, families[name].type)
    assert value(families, "vllm:num_requests_running", model_name="demo") == 0
    # what the docs and the dashboard name is what a scrape holds (a replica's series only with --engine vllm, a
    # task's only with --tasks: test_tasks scrapes those)
    named = set()
    for page in ("metrics.md", "grafana-blink.json"):
        named |= set(re.findall(r"\b(vllm:[a-z0-9_]+|blink_[a-z0-9_]+)", (ROOT / "docs" / page).read_text()))
    bases = {re.sub(r"_(total|bucket|count|sum)$", "", name) for name in named}
    missing = sorted(
        b for b in bases if b not in families and not b.startswith(("blink_replica", "blink_zerogpu", "blink_task"))
    )
    assert not missing, missing
    assert value(families, "blink_admission_capacity", kind="decide") == 2


def _two_decisions_a_chat_and_a_4xx(http: httpx.Client) -> httpx.Response:
    """Two decisions and a chat answered, then a decision refused with a 4xx (returned: its status is counted)."""
    for _ in range(2):
        r = http.post("/v1/systemone", json=DECISION)
        assert r.status_code == 200, r.text
    assert http.post("/v1/chat/completions", json=CHAT).status_code == 200
    bad = http.post("/v1/systemone", json={"state": "x", "questions": {"q": {"type": "maybe"}}})
    assert 400 <= bad.status_code < 500, bad.text
    return bad


def _burst(http: httpx.Client, n: int) -> list[httpx.Response]:
    """`n` large decisions sent at once, one thread each: on two places, those that find none are refused 529."""
    burst: list[httpx.Response] = []
    threads = [
        threading.Thread(target=lambda i=i: burst.append(http.post("/v1/systemone", json=big(i)))) for i in range(n)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    return burst


def _assert_decisions_counted(moved, decisions: int) -> None:
    """`decisions` answered DECISIONs counted, each with its three questions (one of each type) and their options."""
    assert moved("blink_decisions") == decisions
    for kind in ("noul", "choice", "score"):
        assert moved("blink_questions", type=kind) == decisions, kind
        assert moved("blink_options", type=kind) >= 4, kind
    assert moved("blink_options", type="choice") == 3 * decisions  # its three criteria each time


def test_counters_move_with_decisions_chats_a_4xx_and_a_529(tight):
    _, before = scrape(tight)
    with httpx.Client(base_url=tight, timeout=120) as http:
        bad = _two_decisions_a_chat_and_a_4xx(http)
        # a burst of decisions on two places: those that find none are refused 529 at once
        burst = _burst(http, 12)
    statuses = sorted(r.status_code for r in burst)
    assert set(statuses) == {200, 529} and len(statuses) == 12, statuses
    assert all(r.headers.get("retry-after") for r in burst if r.status_code == 529)
    _, after = scrape(tight)

    def moved(name: str, suffix: str = "", **labels) -> float:
        return value(after, name, suffix, **labels) - value(before, name, suffix, **labels)

    answered = statuses.count(200)
    _assert_decisions_counted(moved, 2 + answered)
    assert moved("vllm:prompt_tokens") > 0 and moved("vllm:prefix_cache_queries") > 0
    assert moved("vllm:prefix_cache_hits") > 0  # the second decision's state came from the prefix-state cache
    assert moved("blink_chats") == 1 and moved("vllm:generation_tokens") >= 1
    assert moved("vllm:time_to_first_token_seconds", "_count") == 1
    assert moved("vllm:e2e_request_latency_seconds", "_count") == 3 + answered
    assert moved("blink_refusals", status=str(bad.status_code)) == 1
    assert moved("blink_refusals", status="529") == statuses.count(529)
    assert moved("blink_admission_wait_seconds", "_count", kind="chat") == 1
    assert moved("blink_admission_wait_seconds", "_count", kind="decide") == 14


def hostile(rng: random.Random, http: httpx.Client) -> None:
    """One request as a hostile public sends them: random paths, methods, model names, headers and bodies."""

    def word(n: int = 12) -> str:
        return "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(n))

    headers = {f"x-{word(6)}": word(), "x-request-id": word(), "x-typesafe-request-id": word()}
    if rng.random() < 0.3:
        headers["authorization"] = f"Bearer {word(20)}"
    path = rng.choice(
        [
            f"/v1/{word()}",
            f"/v1/systemone/{word()}",
            f"/v1/models/{word()}",
            f"/{word()}",
            "/v1/chat/completions",
            "/v1/systemone",
            "/v1/completions",
            "/metrics",
        ]
    )
    method = rng.choice(["GET", "POST", "PUT", "DELETE", "PATCH"])
    body = rng.choice(
        [
            {"model": word(), "messages": [{"role": word(5), "content": word()}]},
            {"model": word(), "prompt": word(), "max_tokens": rng.choice([0, -1, 10**9])},
            {"state": word(), "questions": {word(): {"type": word()}}},
            {word(): word()},
        ]
    )
    http.request(method, path, json=body, headers=headers)


def test_a_hostile_client_adds_no_series(tight):
    rng = random.Random(43)
    with httpx.Client(base_url=tight, timeout=60) as http:
        for _ in range(150):  # every kind of refusal it can cause, once
            hostile(rng, http)
        text, families = scrape(tight)
        seen = series(families)
        for _ in range(300):  # the same shapes, other random values: not one series more
            hostile(rng, http)
        text2, families2 = scrape(tight)
    assert series(families2) == seen, sorted(series(families2) - seen)
    labels = {v for _, pairs in seen for _, v in pairs}
    assert len(labels) < 100 and all(len(v) < 80 for v in labels), sorted(labels)


def promtool() -> str:
    """promtool's path: ci/promtool-setup.sh finds it on PATH or unpacks it from Debian's package (no install)."""
    found = subprocess.run(
        ["bash", str(ROOT / "ci" / "promtool-setup.sh")], capture_output=True, text=True, timeout=600
    )
    if found.returncode != 0 or not found.stdout.strip():
        pytest.fail(f"no promtool: ci/promtool-setup.sh exited {found.returncode}: {found.stderr[-2000:]}")
    return found.stdout.strip().splitlines()[-1]


def test_promtool_finds_nothing_but_the_colons(tight):
    tool = promtool()
    httpx.post(tight + "/v1/systemone", json=DECISION, timeout=120)
    text, _ = scrape(tight)
    checked = subprocess.run([tool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    problems = [
        line
        for line in (checked.stdout + checked.stderr).splitlines()
        if line.strip() and "metric names should not contain ':'" not in line
    ]
    assert not problems, problems


def test_metrics_is_behind_the_key(keyed_server):
    assert httpx.get(keyed_server + "/metrics", timeout=30).status_code == 401
    assert (
        httpx.get(keyed_server + "/metrics", headers={"Authorization": "Bearer wrong"}, timeout=30).status_code == 401
    )
    _, families = scrape(keyed_server, "sekret-key-123")
    assert "vllm:num_requests_running" in families


def test_the_space_serves_metrics_only_when_the_knob_is_on():
    from blink.settings import resolve_space

    assert resolve_space({}, env={})[0].metrics is False
    assert resolve_space({}, env={"BLINK_METRICS": "1"})[0].metrics is True
    assert resolve_space({"METRICS": True}, env={})[0].metrics is True


@pytest.mark.e2e
@pytest.mark.space
def test_the_space_with_the_knob_on_records_decisions_and_gpu_seconds(demo_root):
    env = {"BLINK_MODEL": "demo", "BLINK_METRICS": "1", "BLINK_API_KEY": KEY}
    with running([sys.executable, str(ROOT / "app.py")], demo_root, env=env, name="space-metrics") as url:
        assert httpx.get(url + "/metrics", timeout=30).status_code == 401
        _, before = scrape(url, KEY)
        r = httpx.post(url + "/v1/systemone", json=DECISION, headers={"Authorization": f"Bearer {KEY}"}, timeout=300)
        assert r.status_code == 200, r.text
        _, after = scrape(url, KEY)
    assert value(after, "blink_decisions") - value(before, "blink_decisions") == 1
    requested = value(after, "blink_zerogpu_requested_seconds", kind="decide")
    assert requested >= 1 and value(after, "blink_zerogpu_used_seconds", kind="decide") > 0, requested


def test_the_route_list_follows_the_knob(demo_dir):
    from blink.server import api_routes
    from helpers.scripted import scripted_context

    ctx = scripted_context(demo_dir, "blink-metrics").ctx
    assert "/metrics" in [r.path for r in api_routes(ctx)]
    # what the Space grafts by default: /metrics says it is off and how to turn it on, in the API's error shape
    from starlette.applications import Starlette
    from starlette.testclient import TestClient

    with TestClient(Starlette(routes=api_routes(ctx, metrics=False))) as client:
        off = client.get("/metrics")
    assert off.status_code == 404 and off.json()["error"]["code"] == "metrics_off", off.text
    assert "BLINK_METRICS=true" in off.json()["error"]["message"]


def test_scored_prompts_count_their_tokens_and_the_prefixes_they_resume(tight):
    """lm-eval's loglikelihood requests (echo, no completion) count as prefix-cache queries, and the second of two
    prompts sharing a start counts the tokens its saved scoring prefix spared, as `usage` reports them."""
    prompt = "Question: which of these is a colour of the sky on a clear day at noon? " * 4
    body = {"model": "demo", "prompt": [prompt + "Blue."], "echo": True, "max_tokens": 0, "logprobs": 1}
    _, before = scrape(tight)
    with httpx.Client(base_url=tight, timeout=120) as http:
        first = http.post("/v1/completions", json=body)
        second = http.post("/v1/completions", json={**body, "prompt": [prompt + "Green."]})
    assert first.status_code == second.status_code == 200, (first.text, second.text)
    _, after = scrape(tight)
    tokens = first.json()["usage"]["prompt_tokens"] + second.json()["usage"]["prompt_tokens"]
    cached = second.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached >= 32  # the second resumed at a 32-token block its first saved

    def moved(name: str) -> float:
        return value(after, name) - value(before, name)

    assert moved("vllm:prefix_cache_queries") == moved("vllm:prompt_tokens") == tokens
    assert moved("vllm:prefix_cache_hits") == cached
