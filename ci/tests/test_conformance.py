"""Conformance with suites nobody here wrote, on a real `python -m blink serve --model demo` on loopback:

- llm-comply 0.5.0 (the Open Responses specification's tests and OpenAI chat's), run in this process through its
  own runner against the bundled specs. A test passes, or fails only for the random weights: then it is an xfail
  with that reason, and its wire log (the request, the body or events the server sent, as llm-comply recorded
  them) is checked to be a well-formed, complete answer — a run to the token limit, or an image refused by a model
  that reads text only. Any other failure is the server's and fails here;
- what the suites found: every field both specs require, with its real value; `model` required; a user message
  with `content: null` refused; a forced tool call cut off by the token limit still a call, no markup in text;
- requests the server will refuse are refused at once on every OpenAI route while the only chat slot is held.
"""

from __future__ import annotations

import json
import time

import httpx
import pytest
from llm_comply.config import ComplianceConfig
from llm_comply.result import TestStatus
from llm_comply.runner import TestRunner
from llm_comply.schema import SpecLoader
from llm_comply.tests import get_tests

from helpers import blink_serve, node_script, running

CAP = 32  # the server's output cap: the random model runs to it, so every turn is quick
SLOT_WAIT_S = 20
SPECS = {"open-responses": "openresponses.json", "openai-chat": "openai_chat.json"}

# llm-comply's errors that only the random weights cause, and why
RUNS_TO_LIMIT = "random weights: the demo model never ends a turn by itself; it runs to the token limit"
READS_NO_IMAGES = "the demo model reads text only: an image is refused with 400, as it should be"
MODEL_ONLY_ERRORS = {
    "expected status='completed', got 'incomplete'": RUNS_TO_LIMIT,
    "finish_reason: expected 'stop', got 'length'": RUNS_TO_LIMIT,
    "finish_reason: expected 'tool_calls', got 'length'": RUNS_TO_LIMIT,
    "HTTP 400 (expected [200])": READS_NO_IMAGES,
}
IMAGE_TESTS = {"image-input", "chat-image-input"}


@pytest.fixture(scope="module")
def url(demo_root):
    """Eight chat slots (the suites' requests may overlap), every reply capped at CAP tokens."""
    argv = blink_serve("--max-concurrent-chats", "8", "--max-output-tokens", str(CAP))
    with running(argv, demo_root, name="serve-conformance") as base:
        yield base


@pytest.fixture(scope="module")
def one_slot(demo_root):
    argv = blink_serve("--max-concurrent-chats", "1", "--chat-slot-wait-s", str(SLOT_WAIT_S))
    with running(argv, demo_root, name="serve-conformance-slot") as base:
        yield base


_RUNS: dict[str, dict] = {}


def suite(url: str, fmt: str) -> dict:
    """llm-comply's results for one format, by test id (run once per module)."""
    if fmt not in _RUNS:
        import llm_comply

        spec = SpecLoader(str(__import__("pathlib").Path(llm_comply.__file__).parent / "specs" / SPECS[fmt]))
        # verbose: the results keep the request, the body and the events (the wire log the xfails are checked on)
        config = ComplianceConfig(base_url=url + "/v1", api_key="dummy", model="demo", timeout=120, verbose=True)
        results = TestRunner(config, get_tests(fmt), spec).run_all().results
        _RUNS[fmt] = {r.id: r for r in results}
    return _RUNS[fmt]


def _ids(fmt: str) -> list[str]:
    return [t.id for t in get_tests(fmt)]


def _events_of(result) -> list[dict]:
    """The events' data, in order (llm-comply keeps `{"type", "data"}` per event)."""
    return [e["data"] for e in result.stream_events or [] if isinstance(e.get("data"), dict)]


def check_ran_to_limit(fmt: str, result) -> None:
    """The wire log of a turn the random model ran to the token limit: a whole, well-formed answer that says so."""
    if fmt == "open-responses":
        events = _events_of(result)
        if result.request.get("stream"):
            kinds = [e.get("type") for e in events]
            assert kinds[0] == "response.created" and kinds[-1] == "response.incomplete", kinds
            assert [e["sequence_number"] for e in events] == list(range(len(events)))
            body = events[-1]["response"]
        else:
            body = result.response
        assert body["status"] == "incomplete" and body["incomplete_details"] == {"reason": "max_output_tokens"}
        assert body["usage"]["output_tokens"] == CAP, body["usage"]
        assert body["completed_at"] is None
        for item in body["output"]:
            assert item["status"] == "incomplete" or item["type"] == "function_call", item
            text = "".join(p.get("text", "") for p in item.get("content") or [])
            assert "<tool_call>" not in text and "<function=" not in text
    else:
        body = result.response
        choice = body["choices"][0]
        assert choice["finish_reason"] == "length" and body["usage"]["completion_tokens"] == CAP, body
        message = choice["message"]
        assert message["refusal"] is None and message["annotations"] == []
        assert "<tool_call>" not in (message["content"] or "")
        if result.request.get("tool_choice") not in (None, "auto", "none"):  # a forced call cut off: still a call
            assert message["tool_calls"][0]["function"]["name"], message


def check_image_refused(result) -> None:
    error = result.response["error"]
    assert error["type"] == "invalid_request_error" and "image" in error["message"].lower(), error
    assert error["param"] and error["param"].startswith(("input", "messages")), error


@pytest.mark.timeout(900)
@pytest.mark.parametrize(("fmt", "test_id"), [(fmt, tid) for fmt in SPECS for tid in _ids(fmt)], ids=lambda v: str(v))
def test_llm_comply(url, fmt, test_id):
    result = suite(url, fmt)[test_id]
    if result.status in (TestStatus.PASSED, TestStatus.SKIPPED):
        if result.status is TestStatus.SKIPPED:
            pytest.skip(f"llm-comply skips it: {result.errors}")
        return
    errors = list(result.errors)
    primary = [e for e in errors if e in MODEL_ONLY_ERRORS]
    assert primary, f"server-side failure: {errors}\nrequest: {result.request}\nresponse: {result.response}"
    reason = MODEL_ONLY_ERRORS[primary[0]]
    if reason == READS_NO_IMAGES:
        assert test_id in IMAGE_TESTS, (test_id, errors)
        check_image_refused(result)  # the rest of its errors follow from the 400 (no id, no output)
    else:
        assert errors == primary, f"server-side failure besides the model's: {errors}"
        check_ran_to_limit(fmt, result)
    pytest.xfail(reason)


# what the suites found, asked directly ----------------------------------------------------------------------------
def test_responses_carry_every_required_field_with_its_value(url):
    import llm_comply

    schema = SpecLoader(str(__import__("pathlib").Path(llm_comply.__file__).parent / "specs" / SPECS["open-responses"]))
    required = schema._schemas["ResponseResource"]["required"]
    base = {"model": "demo", "input": "Say hi", "max_output_tokens": 4}
    plain = httpx.post(url + "/v1/responses", json=base, timeout=120).json()
    assert not [k for k in required if k not in plain], plain
    defaults = httpx.get(url + "/healthz").json()
    assert plain["temperature"] == 1.0 and plain["top_p"] == 1.0, defaults.get("sampling")  # the demo's defaults
    assert plain["presence_penalty"] == 0.0 and plain["frequency_penalty"] == 0.0
    assert plain["top_logprobs"] == 0 and plain["max_tool_calls"] is None and plain["service_tier"] == "default"
    assert plain["status"] == "incomplete" and plain["completed_at"] is None
    assert plain["output"][-1]["status"] == "incomplete"
    asked = {
        **base,
        "temperature": 0.5,
        "top_p": 0.9,
        "top_logprobs": 2,
        "max_tool_calls": 3,
        "safety_identifier": "user-7",
        "prompt_cache_key": "k1",
    }
    got = httpx.post(url + "/v1/responses", json=asked, timeout=120).json()
    assert (got["temperature"], got["top_p"], got["top_logprobs"], got["max_tool_calls"]) == (0.5, 0.9, 2, 3)
    assert (got["safety_identifier"], got["prompt_cache_key"]) == ("user-7", "k1")
    assert got["output"][-1]["content"][0]["logprobs"][0]["top_logprobs"], got["output"]


def test_a_completed_response_says_when(url):
    """A reply that ends before the limit (a boolean schema: `true` or `false`, then the end) is `completed`, with
    `completed_at`, and so are its items."""
    fmt = {"format": {"type": "json_schema", "name": "b", "schema": {"type": "boolean"}}}
    t = int(time.time())
    got = httpx.post(url + "/v1/responses", json={"model": "demo", "input": "hi", "text": fmt}, timeout=120).json()
    assert got["status"] == "completed" and got["incomplete_details"] is None, got
    assert got["completed_at"] >= got["created_at"] >= t - 1, got
    assert [item["status"] for item in got["output"]] == ["completed"] * len(got["output"])
    assert json.loads(got["output"][-1]["content"][0]["text"]) in (True, False)
    chat = {
        "model": "demo",
        "messages": [{"role": "user", "content": "hi"}],
        "response_format": {"type": "json_object"},
    }
    message = httpx.post(url + "/v1/chat/completions", json=chat, timeout=120).json()["choices"][0]["message"]
    assert message["refusal"] is None and message["annotations"] == [], message


def test_the_openai_npm_sdk_creates_responses_plain_and_streamed(url):
    """The openai npm SDK's `responses.create` (plain, `stream: true`) and its `responses.stream` helper."""
    got = node_script("responses.mjs", url + "/v1", "demo")
    assert "error" not in got, got
    assert got["plain"]["status"] == "incomplete" and got["plain"]["usage"]["output_tokens"] == 8, got
    assert got["plain"]["id"].startswith("resp_") and got["plain"]["output_text"]
    types = got["streamed"]["types"]
    assert types[:2] == ["response.created", "response.in_progress"] and types[-1] == "response.incomplete", types
    assert "response.output_text.delta" in types and got["streamed"]["status"] == "incomplete"
    assert got["helper"]["status"] == "incomplete" and got["helper"]["text"] == got["helper"]["output_text"], got


@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/responses", "/v1/completions", "/v1/decisions"])
def test_model_is_required_and_the_error_names_what_is_served(url, route):
    body = {
        "/v1/chat/completions": {"messages": [{"role": "user", "content": "hi"}]},
        "/v1/responses": {"input": "hi"},
        "/v1/completions": {"prompt": "hi"},
        "/v1/decisions": {"input": "hi", "questions": [{"type": "predicate", "name": "q", "instructions": "Is it?"}]},
    }[route]
    r = httpx.post(url + route, json=body, timeout=60)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "model" and error["code"] == "missing" and "demo" in error["message"], error


@pytest.mark.parametrize("role", ["user", "system", "developer"])
def test_a_message_with_null_content_is_refused_naming_it(url, role):
    messages = [{"role": "user", "content": "hi"}, {"role": role, "content": None}]
    r = httpx.post(url + "/v1/chat/completions", json={"model": "demo", "messages": messages}, timeout=60)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "messages[1].content" and "messages[1]" in error["message"], error
    r = httpx.post(url + "/v1/responses", json={"model": "demo", "input": messages}, timeout=60)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "input[1].content", r.text
    # an assistant's content may be null (its tool calls say it all)
    fine = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None}, {"role": "user", "content": "x"}]
    r = httpx.post(url + "/v1/chat/completions", json={"model": "demo", "messages": fine, "max_tokens": 1}, timeout=60)
    assert r.status_code == 200, r.text


WEATHER = {
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def _sse(lines) -> list[dict]:
    return [json.loads(line[6:]) for line in lines if line.startswith("data: ") and line != "data: [DONE]"]


def _assert_chat_cut_off_a_call(url: str, chat: dict, stream: bool) -> None:
    """Chat's answer, whole or streamed: a `get_weather` call with `finish_reason: "length"`, no markup in text."""
    if not stream:
        r = httpx.post(url + "/v1/chat/completions", json=chat, timeout=300).json()
        choice = r["choices"][0]
        assert choice["finish_reason"] == "length", r
        assert choice["message"]["tool_calls"][0]["function"]["name"] == "get_weather", r
        assert "<tool_call>" not in (choice["message"]["content"] or "")
        return
    with httpx.stream("POST", url + "/v1/chat/completions", json=chat, timeout=300) as s:
        chunks = _sse(s.iter_lines())
    deltas = [c["choices"][0] for c in chunks if c.get("choices")]
    assert deltas[-1]["finish_reason"] == "length", deltas
    calls = [d["delta"]["tool_calls"] for d in deltas if d["delta"].get("tool_calls")]
    assert calls and calls[0][0]["function"]["name"] == "get_weather"
    assert "<tool_call>" not in "".join(d["delta"].get("content") or "" for d in deltas)


def _cut_off_response(url: str, responses: dict, stream: bool) -> dict:
    """The response Responses answers, whole or (streamed) the one its last event carries, which must be
    `response.incomplete`."""
    if not stream:
        return httpx.post(url + "/v1/responses", json=responses, timeout=300).json()
    with httpx.stream("POST", url + "/v1/responses", json=responses, timeout=300) as s:
        events = _sse(s.iter_lines())
    assert events[-1]["type"] == "response.incomplete", [e["type"] for e in events]
    return events[-1]["response"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_forced_call_cut_off_by_the_limit_is_still_a_call(url, stream):
    """As OpenAI answers it: a `tool_calls` entry (partial arguments) with `finish_reason: "length"`; a
    `function_call` item in an incomplete response; never `<tool_call>` markup in the text."""
    chat = {
        "model": "demo",
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [{"type": "function", "function": WEATHER}],
        "tool_choice": "required",
        "max_tokens": 6,
        "stream": stream,
    }
    responses = {
        "model": "demo",
        "input": "Weather in Paris?",
        "tools": [{"type": "function", **WEATHER}],
        "tool_choice": "required",
        "max_output_tokens": 6,
        "stream": stream,
    }
    _assert_chat_cut_off_a_call(url, chat, stream)
    got = _cut_off_response(url, responses, stream)
    assert got["status"] == "incomplete", got
    calls = [item for item in got["output"] if item["type"] == "function_call"]
    assert calls and calls[-1]["name"] == "get_weather" and calls[-1]["status"] == "incomplete", got["output"]
    texts = [p["text"] for item in got["output"] if item["type"] == "message" for p in item["content"]]
    assert not any("<tool_call>" in t or "<function=" in t for t in texts), texts


# refused at once while the only chat slot is held ----------------------------------------------------------------
REFUSED = {
    "/v1/chat/completions": [
        {"messages": [{"role": "user", "content": "hi"}]},  # no model
        {"model": "demo", "messages": [{"role": "user", "content": None}]},
    ],
    "/v1/responses": [
        {"input": "hi"},
        {"model": "demo", "input": [{"role": "user", "content": None}]},
        {"model": "demo", "input": "hi", "previous_response_id": "resp_1"},
    ],
    "/v1/completions": [{"prompt": "hi"}, {"model": "demo", "prompt": ["hi", ""], "echo": True}],
    "/v1/decisions": [{"model": "demo", "input": "x", "questions": []}],
}


@pytest.mark.parametrize("route", list(REFUSED))
def test_a_refused_request_is_refused_at_once_while_the_only_slot_is_held(one_slot, route):
    holding = {"model": "demo", "max_tokens": 3000, "stream": True, "messages": [{"role": "user", "content": "Go on."}]}
    with (
        httpx.Client(timeout=120) as client,
        client.stream("POST", one_slot + "/v1/chat/completions", json=holding) as s,
    ):
        assert s.status_code == 200
        lines = s.iter_lines()
        while '"content":""' in (line := next(lines)) or not line.startswith("data: "):
            pass  # the role chunk, then the first text: this stream is generating, it holds the slot
        assert '"finish_reason":null' in line, line
        assert client.get(one_slot + "/healthz").json()["chat_slots"]["running"] == 1
        for body in REFUSED[route]:
            t = time.perf_counter()
            r = client.post(one_slot + route, json=body)
            took = time.perf_counter() - t
            assert 400 <= r.status_code < 500, (route, body, r.status_code, r.text[:300])
            assert r.json()["error"]["type"] == "invalid_request_error", r.text[:300]
            assert took < SLOT_WAIT_S / 2, (route, body, took)


def test_scoring_prompts_is_decision_work_a_place_per_prompt(one_slot):
    """`echo` with `max_tokens` 0 (or 1 at temperature 0) generates nothing past the prompts' own pass: it is
    admitted as decisions are, a place per prompt, so it is answered while the only chat slot is held, and a list
    of more prompts than the decision gate could ever hold is refused at once (too_much_work)."""
    holding = {"model": "demo", "max_tokens": 3000, "stream": True, "messages": [{"role": "user", "content": "Go on."}]}
    scoring = {"model": "demo", "prompt": [[1, 2, 3], [1, 2, 4]], "echo": True, "logprobs": 1, "max_tokens": 1}
    with (
        httpx.Client(timeout=120) as client,
        client.stream("POST", one_slot + "/v1/chat/completions", json=holding) as s,
    ):
        lines = s.iter_lines()
        while '"content":""' in (line := next(lines)) or not line.startswith("data: "):
            pass
        assert client.get(one_slot + "/healthz").json()["chat_slots"]["running"] == 1
        t = time.perf_counter()
        r = client.post(one_slot + "/v1/completions", json={**scoring, "temperature": 0})
        assert r.status_code == 200 and len(r.json()["choices"]) == 2, r.text[:300]
        assert time.perf_counter() - t < SLOT_WAIT_S / 2
        generating = client.post(one_slot + "/v1/completions", json={**scoring, "max_tokens": 2})
        assert generating.status_code == 529  # a generation waits for the chat slot, then gives up
        many = client.post(one_slot + "/v1/completions", json={**scoring, "max_tokens": 0, "prompt": [[1, 2]] * 100})
        assert many.status_code == 400 and many.json()["error"]["code"] == "too_much_work", many.text[:300]


@pytest.mark.parametrize(
    ("text", "calls", "content"),
    [
        ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa', [("get_weather", '{"city": "Pa')], None),
        ('Sure. <tool_call>\n{"name": "get_wea', [("get_weather", "")], "Sure."),
        ("<tool_call>\n<func", [("get_weather", "")], None),
        ("<tool_call>\n<function=get_weather>\n<parameter=city>\nPar", [("get_weather", '{"city": "Par"}')], None),
        (
            '<tool_call>{"name": "get_weather", "arguments": {}}</tool_call><tool_call>{"name": "get_weather", "ar',
            [("get_weather", "{}"), ("get_weather", "")],
            None,
        ),
    ],
)
def test_a_call_cut_off_by_the_limit_parses_as_a_call(text, calls, content):
    from blink.generate.toolcalls import parse

    parsed = parse(text, ["get_weather"], truncated=True)
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in parsed.calls] == calls
    assert parsed.content == content and parsed.truncated
    untouched = parse(text, ["get_weather"])  # a turn that ended by itself: an unclosed call stays text
    assert not untouched.truncated
    whole = parse('<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>', ["get_weather"], truncated=True)
    assert not whole.truncated and len(whole.calls) == 1
