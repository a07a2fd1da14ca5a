"""The OpenAI surface beyond chat, with real clients against the standalone server (`python -m blink serve --model
demo --cors-origins ...`, a real process on loopback): `/v1/responses` (the openai SDK, streamed and not, and the
body Open WebUI sends on a Responses connection), `GET /v1/models/{id}` and model modalities, CORS, compression, and
the Decisions fields openai 3.57 sends.

The server is conftest.py's `surface` (session-scoped, started once): it serves test_openai_text_completions.py
too (the legacy `/v1/completions` and vLLM's /tokenize), which runs right after this file, and stops after the last
test that uses it.
"""

from __future__ import annotations

import gzip
import json

import httpx
import openai
import pytest
import zstandard

from helpers import ORIGIN, assert_close, uncached

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def client(surface):
    return openai.OpenAI(base_url=surface + "/v1", api_key="anything", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def name(surface):
    return httpx.get(surface + "/healthz", timeout=30).json()["served_model_name"]


# /v1/responses ----------------------------------------------------------------------------------------------
def test_responses_create_non_streamed(client, name):
    out = client.responses.create(
        model=name, input="Say hello", instructions="Be terse.", max_output_tokens=6, temperature=0
    )
    assert out.object == "response" and out.model == name and out.id.startswith("resp_")
    assert out.status == "incomplete" and out.incomplete_details.reason == "max_output_tokens"
    assert out.store is False and out.instructions == "Be terse."
    [message] = out.output
    assert message.type == "message" and message.role == "assistant"
    assert out.output_text and out.output_text == message.content[0].text
    assert out.usage.output_tokens == 6 and out.usage.input_tokens > 0
    assert out.usage.total_tokens == out.usage.input_tokens + 6


def test_responses_streamed_equals_non_streamed(client, name):
    kwargs = dict(
        model=name,
        input=[{"role": "user", "content": [{"type": "input_text", "text": "Say hello"}]}],
        max_output_tokens=8,
        temperature=0,
    )
    whole = client.responses.create(**kwargs)
    events = list(client.responses.create(**kwargs, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:5] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.incomplete",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == whole.output_text
    final = events[-1].response
    assert final.output_text == whole.output_text and final.usage.output_tokens == whole.usage.output_tokens
    assert final.usage.input_tokens == whole.usage.input_tokens


def test_responses_are_not_stored(client, name):
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=name, input="again", previous_response_id="resp_123")
    assert caught.value.body["param"] == "previous_response_id"
    assert "stores no" in caught.value.body["message"]


@pytest.mark.parametrize(
    "body,param",
    [
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type"),
        ({"input": "x", "tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
            "input[0].content[0].type",
        ),
        ({"input": "x", "max_output_tokens": 0}, "max_output_tokens"),
        ({"input": "x", "temperature": 3}, "temperature"),
        ({}, "input"),
    ],
)
def test_responses_bad_requests_name_the_field(surface, name, body, param):
    r = httpx.post(surface + "/v1/responses", json={"model": name, **body}, timeout=60)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param and r.json()["error"]["type"] == "invalid_request_error"


def test_open_webui_responses_body(surface, name):
    """What Open WebUI's `convert_to_responses_payload` POSTs to `{base}/responses` on a connection with
    `api_type: "responses"`: the chat replayed as items (earlier output items, a reasoning item with no summary,
    a function call and its output), `instructions` from the system message, flat function tools."""
    body = {
        "model": name,
        "stream": True,
        "temperature": 0.7,
        "seed": 3,
        "max_output_tokens": 12,
        "instructions": "You are helpful.",
        "tools": [{"type": "function", "name": "run_skill_script", "parameters": {}}],
        "tool_choice": "auto",
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "build an xlsx"}]},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "function_call", "call_id": "call_1", "name": "run_skill_script", "arguments": "{}", "id": "fc_1"},
            {"type": "function_call_output", "call_id": "call_1", "output": "saved report.xlsx"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Done."}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "thanks"}]},
        ],
    }
    with httpx.stream("POST", surface + "/v1/responses", json=body, timeout=120) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        assert "content-encoding" not in r.headers
        lines = [line for line in r.iter_lines() if line.startswith("data: ")]
    events = [json.loads(line[6:]) for line in lines]
    assert events[0]["type"] == "response.created" and events[-1]["type"] in (
        "response.completed",
        "response.incomplete",
    )
    assert events[-1]["response"]["usage"]["output_tokens"] >= 1


# /v1/models -------------------------------------------------------------------------------------------------
def test_models_carry_modalities_and_resolve_by_id(client, surface, name):
    models = client.models.list().data
    assert [m.id for m in models] == [name, "blink-alias"]
    for m in models:
        assert m.architecture == {"input_modalities": ["text"], "output_modalities": ["text", "decisions"]}
    one = client.models.retrieve("blink-alias")
    assert one.id == "blink-alias" and one.architecture["output_modalities"] == ["text", "decisions"]
    assert "root" not in one.model_extra
    # any name a request may carry is answered by the served model: GET says so (POST takes it)
    other = client.models.retrieve("jev-latest")
    assert other.id == "jev-latest" and other.model_extra["root"] == name
    hi = [{"role": "user", "content": "hi"}]
    assert client.chat.completions.create(model="jev-latest", messages=hi, max_tokens=1).model == name
    r = httpx.get(surface + "/v1/models/", timeout=30)
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    body = httpx.get(surface + "/v1/models", timeout=30).json()
    assert [m["name"] for m in body["models"]] == [name, "blink-alias"]  # TypeSafe's list, same body


# standalone: CORS and compression ---------------------------------------------------------------------------
def test_cors_preflight_and_simple_request(surface):
    pre = httpx.options(
        surface + "/v1/chat/completions",
        timeout=30,
        headers={
            "Origin": ORIGIN,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type",
        },
    )
    assert pre.status_code == 200 and pre.headers["access-control-allow-origin"] == ORIGIN
    assert "POST" in pre.headers["access-control-allow-methods"]
    got = httpx.get(surface + "/v1/models", headers={"Origin": ORIGIN}, timeout=30)
    assert got.headers["access-control-allow-origin"] == ORIGIN
    assert "x-request-id" in got.headers["access-control-expose-headers"]
    other = httpx.options(
        surface + "/v1/chat/completions",
        timeout=30,
        headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"},
    )
    assert other.status_code == 400 and "access-control-allow-origin" not in other.headers


def test_no_cors_headers_without_the_knob(server):
    r = httpx.get(server + "/v1/models", headers={"Origin": ORIGIN}, timeout=30)
    assert "access-control-allow-origin" not in r.headers


def test_large_bodies_are_compressed_when_accepted(surface, name):
    body = {
        "model": name,
        "input": "x",
        "questions": [
            {"type": "choice", "instructions": f"Pick {i}", "choices": [{"value": f"option-{j}"} for j in range(20)]}
            for i in range(4)
        ],
    }
    raw = httpx.post(surface + "/v1/decisions", json=body, headers={"Accept-Encoding": "identity"}, timeout=120)
    assert raw.status_code == 200 and "content-encoding" not in raw.headers
    for encoding, decode in (
        ("zstd", lambda b: zstandard.ZstdDecompressor().decompressobj().decompress(b)),
        ("gzip", gzip.decompress),
    ):
        with httpx.stream(
            "POST", surface + "/v1/decisions", json=body, timeout=120, headers={"Accept-Encoding": encoding}
        ) as r:
            assert r.headers["content-encoding"] == encoding
            data = decode(b"".join(r.iter_raw()))  # as sent (httpx would decode it)
        assert_close(json.loads(data)["answers"], raw.json()["answers"])  # another request: within 1e-6
    small = httpx.get(surface + "/healthz", headers={"Accept-Encoding": "gzip"}, timeout=30)
    assert small.status_code == 200


def test_event_streams_are_never_compressed(surface, name):
    with httpx.stream(
        "POST",
        surface + "/v1/chat/completions",
        timeout=120,
        headers={"Accept-Encoding": "gzip, zstd"},
        json={"model": name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 40, "stream": True},
    ) as r:
        assert "content-encoding" not in r.headers
        assert r.read().decode().rstrip().endswith("data: [DONE]")


# /v1/decisions ----------------------------------------------------------------------------------------------
def test_decisions_accept_the_fields_openai_sends(client, surface, name):
    questions = [{"type": "predicate", "name": "damaged", "instructions": "Was the item damaged?"}]
    plain = client.decisions.create(model=name, input="The parcel arrived crushed.", questions=questions)
    hinted = client.decisions.create(
        model=name,
        input="The parcel arrived crushed.",
        questions=questions,
        prompt_cache_key="tenant-42",
        safety_identifier="user-7",
        prompt_cache_options={"ttl": "30m"},
    )
    assert hinted.answers[0].probability == pytest.approx(plain.answers[0].probability, abs=1e-6)
    r = httpx.post(
        surface + "/v1/decisions",
        timeout=60,
        json={"model": name, "input": "x", "questions": questions, "prompt_cache_key": 42},
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt_cache_key"


SYSTEMONE_BODY = {
    "state": {"message": "I was charged twice. Please fix this today."},
    "questions": {
        "refund": {"type": "noul", "instructions": "Is the customer asking for money back?"},
        "team": {"type": "choice", "instructions": "Which team?", "criteria": {"billing": "Charges", "tech": None}},
        "anger": {"type": "score", "instructions": "How frustrated?", "criteria": ["Calm", "Frustrated", "Angry"]},
    },
}


def test_decisions_take_the_systemone_body_and_answer_as_systemone(surface):
    """LiveKit Agents' `inference.DecisionModel` posts System One's body (`state`, a `questions` object) to
    `{base_url}/decisions`: the same answer as /v1/systemone (within blink's 1e-6), in System One's shape."""
    for body in (SYSTEMONE_BODY, {**SYSTEMONE_BODY, "model": "jev-latest"}):
        one = httpx.post(surface + "/v1/systemone", json=body, timeout=60)
        two = httpx.post(surface + "/v1/decisions", json=body, timeout=60)
        assert one.status_code == two.status_code == 200, two.text
        assert_close(uncached(two.json()), uncached(one.json()))
        assert two.headers["x-typesafe-request-id"].startswith("req_")
    # TypeSafe's multipart (a `request` part holding the JSON) is System One's too
    files = {"request": (None, json.dumps(SYSTEMONE_BODY), "application/json")}
    three = httpx.post(surface + "/v1/decisions", files=files, timeout=60)
    assert three.status_code == 200, three.text
    assert_close(uncached(three.json())["answers"], one.json()["answers"])


@pytest.mark.parametrize(
    "body",
    [
        {"state": "x", "questions": {"q": {"type": "nope", "instructions": "Is it?"}}},
        {"state": "x", "questions": {}},
        {"questions": {"q": {"type": "noul", "instructions": "Is it?"}}},
    ],
)
def test_decisions_refuse_a_bad_systemone_body_as_systemone_does(surface, body):
    one = httpx.post(surface + "/v1/systemone", json=body, timeout=60)
    two = httpx.post(surface + "/v1/decisions", json=body, timeout=60)
    assert one.status_code == two.status_code and 400 <= two.status_code < 500
    assert two.json() == one.json() and isinstance(two.json()["error"], str)


def test_decisions_with_input_stay_openai(surface, name):
    """`input` makes a body OpenAI's unless its `questions` is an object (then it is Gemini's, answered in Google's
    shape: ci/tests/test_gemini.py): its errors stay in OpenAI's shape."""
    body = {"model": name, "input": "x", "questions": "Is it a refund?"}
    r = httpx.post(surface + "/v1/decisions", json=body, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "questions"
    gemini = httpx.post(surface + "/v1/decisions", json={**body, "questions": SYSTEMONE_BODY["questions"]}, timeout=60)
    assert gemini.status_code == 200 and set(gemini.json()["answers"]) == set(SYSTEMONE_BODY["questions"])
    r = httpx.post(surface + "/v1/decisions", json={"model": name, "questions": []}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "input"
