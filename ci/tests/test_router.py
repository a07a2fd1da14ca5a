"""blink in front of `vllm-router` in front of real vLLM replicas: the two replicas test_vllm.py uses (conftest.py's
session-scoped `vllm_replicas`; conftest.py runs this file just before test_vllm.py and test_vllm_serve.py, whose
last tests kill one), vllm-router 0.1.17 (.venv-router, built by ci/router-venv.sh on first use: ~20 s) in front of
them, and blink's real `serve --engine vllm --engine-url ROUTER` in front of it: the router is one replica to blink.

The router's flags are the ones docs/scale-out.md gives: `--policy round_robin` (its default, cache_aware, sends
every request to one replica once blink's prompts share a long head) and a request timeout as long as the longest chat
stream (it covers the whole request, a stream included). Shown here: token-id prompts and blink's reads pass the
router unchanged, decisions spread over both replicas (vLLM's own counters) with the same answers, a chat stream
ends whole (`[DONE]` after its finish reason), jevcompat passes through both layers, blink's /healthz sees one
replica, and a router timeout shorter than a stream cuts it, which blink reports as an error event, never as a
finished answer.
"""

from __future__ import annotations

import json
import re
import sys

import httpx
import pytest

from helpers import assert_all_pass, run_jevcompat, running
from helpers.vllm import router_running

pytestmark = [pytest.mark.timeout(2400), pytest.mark.e2e, pytest.mark.vllm, pytest.mark.slow]

# docs/scale-out.md's flags: load spread, a stream never cut by the router, a stopped replica out within seconds
ROUTER_FLAGS = ["--policy", "round_robin", "--request-timeout-secs", "600"]
ROUTER_FLAGS += ["--health-check-interval-secs", "5", "--health-failure-threshold", "2"]
# CPU replicas on two shared cores: the first calls' assumed speed (docs/scale-out.md); behind the router blink
# has nowhere to retry, so a first call past its timeout would be a 529
BLINK_FLAGS = ["--served-model-name", "blink-qwen3-demo", "--engine-assumed-s-per-token", "0.1"]
SKIPPED_OK = {"auth.bearer", "auth.missing", "auth.invalid", "errors.shape"}  # as test_jevcompat's open server

DECISION = {
    "state": "Order 4471 arrived with a cracked screen and the customer wants a replacement before Friday.",
    "questions": {
        "route": {
            "type": "choice",
            "instructions": "Which team should handle this?",
            "criteria": {"returns": "Damaged items", "billing": "Charges", "shipping": "Late parcels"},
        },
        "urgent": {"type": "noul", "instructions": "Does this need a reply today?"},
        "tone": {"type": "score", "instructions": "How upset?", "criteria": ["Calm", "Annoyed", "Angry"]},
    },
}


@pytest.fixture(scope="module")
def replica_urls(vllm_replicas) -> list[str]:
    dead = [url for url, proc in vllm_replicas if proc.poll() is not None]
    assert not dead, f"replicas {dead} were stopped: test_router.py runs before test_vllm_serve.py's failover tests"
    return [url for url, _ in vllm_replicas]


@pytest.fixture(scope="module")
def router(replica_urls):
    with router_running(replica_urls, *ROUTER_FLAGS) as url:
        yield url


def blink_in_front(router_url: str, model_dir, name: str):
    argv = [sys.executable, "-m", "blink", "serve", "--model", str(model_dir), "--port", "{port}"]
    argv += ["--engine", "vllm", "--engine-url", router_url, *BLINK_FLAGS]
    return running(argv, model_dir.parent, name=name)


@pytest.fixture(scope="module")
def blink_on_router(router, qwen3_dir):
    with blink_in_front(router, qwen3_dir, "blink-router") as url:
        yield url


def served(urls: list[str]) -> dict[str, float]:
    """vLLM's own count of the requests each replica finished (its /metrics)."""
    out = {}
    for url in urls:
        text = httpx.get(url + "/metrics", timeout=30).text
        out[url] = sum(float(v) for v in re.findall(r"^vllm:request_success_total\{[^}]*\} (\S+)$", text, re.M))
    return out


def test_token_id_prompts_and_label_reads_pass_the_router(router, replica_urls, qwen3_dir):
    """What blink sends (token-id prompts, a batch of them, `logprob_token_ids`, `return_token_ids`) reaches vLLM
    through the router as it would directly: the same label log-probabilities from each replica."""
    body = {
        "model": str(qwen3_dir),
        "prompt": [[9707, 11, 1879, 0], [785, 3974, 13876, 38835, 34208, 916]],
        "max_tokens": 1,
        "temperature": 0,
        "logprobs": 3,
        "logprob_token_ids": [362, 425, 356],
        "return_token_ids": True,
    }
    direct = httpx.post(replica_urls[0] + "/v1/completions", json=body, timeout=300)
    assert direct.status_code == 200, direct.text
    for _ in replica_urls:  # round robin: each replica once
        routed = httpx.post(router + "/v1/completions", json=body, timeout=300)
        assert routed.status_code == 200, routed.text
        a, b = direct.json()["choices"], routed.json()["choices"]
        assert len(a) == len(b) == 2
        for x, y in zip(a, b):
            top_a, top_b = x["logprobs"]["top_logprobs"][0], y["logprobs"]["top_logprobs"][0]
            assert top_a.keys() == top_b.keys() and len(top_a) >= 3, (top_a, top_b)
            assert max(abs(top_a[k] - top_b[k]) for k in top_a) < 1e-4


def test_decisions_spread_over_both_replicas_with_the_same_answers(blink_on_router, replica_urls):
    before = served(replica_urls)
    answers = []
    for _ in range(4):
        r = httpx.post(blink_on_router + "/v1/systemone", json=DECISION, timeout=300)
        assert r.status_code == 200, r.text
        answers.append(r.json()["answers"])
    moved = {url: served(replica_urls)[url] - before[url] for url in replica_urls}
    assert sum(moved.values()) >= 4 and min(moved.values()) >= 1, moved  # round robin: both replicas served
    first = answers[0]
    for other in answers[1:]:  # whichever replica answered: the same probabilities (fp32; batching aside)
        for name, answer in first.items():
            a, b = json.dumps(answer, sort_keys=True), json.dumps(other[name], sort_keys=True)
            nums_a = [float(x) for x in re.findall(r"-?\d+\.\d+(?:e-?\d+)?", a)]
            nums_b = [float(x) for x in re.findall(r"-?\d+\.\d+(?:e-?\d+)?", b)]
            assert len(nums_a) == len(nums_b) > 0 and max(abs(x - y) for x, y in zip(nums_a, nums_b)) < 1e-5


def sse(url: str, body: dict) -> list[str]:
    """The `data:` payloads of one streamed chat completion, in order."""
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=600) as r:
        assert r.status_code == 200, r.read()
        return [line[len("data: ") :] for line in r.iter_lines() if line.startswith("data: ")]


CHAT = {
    "model": "blink-qwen3-demo",
    "stream": True,
    "temperature": 0,
    "messages": [{"role": "user", "content": "Write a long note about parcels."}],
    "stream_options": {"include_usage": True},
}


def test_a_chat_stream_ends_whole(blink_on_router):
    events = sse(blink_on_router, {**CHAT, "max_tokens": 48})
    assert events[-1] == "[DONE]", events[-3:]
    chunks = [json.loads(e) for e in events[:-1]]
    assert not any("error" in c for c in chunks), chunks[-2:]
    finishes = [ch["finish_reason"] for c in chunks for ch in c.get("choices", []) if ch.get("finish_reason")]
    assert finishes == ["length"] and chunks[-1]["usage"]["completion_tokens"] == 48


def test_jevcompat_through_blink_and_the_router(blink_on_router):
    assert_all_pass(run_jevcompat(blink_on_router), SKIPPED_OK)


def test_healthz_sees_the_router_as_one_replica(blink_on_router, router):
    """blink's breaker, back-off, spill and retries act on the one URL it was given: the router."""
    body = httpx.get(blink_on_router + "/healthz", timeout=30).json()
    rows = body["vllm"]["replicas"]
    assert [r["url"] for r in rows] == [router] and body["vllm"]["replicas_up"] == 1
    assert rows[0]["served"] >= 1 and rows[0]["max_model_len"] == 32768


def test_a_router_timeout_shorter_than_a_stream_cuts_it_and_blink_says_so(replica_urls, qwen3_dir, blink_on_router):
    """The router's timeout covers the whole request: a stream longer than it is cut with no error and no [DONE]
    from the router; blink ends it with an error event, never with a finish reason."""
    flags = ["--policy", "round_robin", "--request-timeout-secs", "3"]
    with router_running(replica_urls, *flags) as short, blink_in_front(short, qwen3_dir, "blink-router-3s") as url:
        events = sse(url, {**CHAT, "max_tokens": 4000})
    chunks = [json.loads(e) for e in events if e != "[DONE]"]
    text = "".join(ch["delta"].get("content") or "" for c in chunks for ch in c.get("choices", []))
    finishes = [ch["finish_reason"] for c in chunks for ch in c.get("choices", []) if ch.get("finish_reason")]
    assert text and not finishes, finishes  # tokens came, then the cut: no finish reason claimed
    assert "error" in chunks[-1], chunks[-1]
