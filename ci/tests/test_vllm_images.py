"""Images through `serve --engine vllm`, which reads text only (blink loads the tokenizer and templates, no image
processor; the replicas are sent token ids): every route an image can come in by refuses it with its wire's own
4xx, pointed at the part that holds it, before admission: the replica (ci/tests/scripted_vllm.py, vLLM's wire with
made-up log-probabilities) is never called for it. Never a 500.

The routes: chat `image_url` parts (any role, streamed or not), `/v1/responses` `input_image` parts (in messages and
in a tool's output), `/v1/decisions` in OpenAI's shape (`input_image`) and in System One's, `/v1/systemone` (assets,
a data-URI state, TypeSafe's multipart), the MCP `decide` tool, `/v1/moderations` parts and data URIs, and a data-URI
document on `/v1/rerank`, `/rerank`, `/v2/rerank` and `/v1/score`.
"""

from __future__ import annotations

import base64
import json

import httpx
import pytest

from helpers import blink_serve, mcp_call, png, running, start_scripted, stop_group

pytestmark = pytest.mark.e2e

DATA = base64.b64encode(png()).decode()
URI = "data:image/png;base64," + DATA
QUESTIONS = {"ok": {"type": "noul", "instructions": "Is it fine?"}}
TOOL_CALL = {"id": "c1", "type": "function", "function": {"name": "look", "arguments": "{}"}}


def image_url(role: str = "user") -> dict:
    return {
        "role": role,
        "content": [{"type": "text", "text": "Look:"}, {"type": "image_url", "image_url": {"url": URI}}],
    }


def input_image(text: str = "Look:") -> dict:
    return {
        "role": "user",
        "content": [{"type": "input_text", "text": text}, {"type": "input_image", "image_url": URI}],
    }


# (path, body, the `param` the 400 names)
OPENAI_SHAPED = {
    "chat": ("/v1/chat/completions", {"messages": [image_url()], "max_tokens": 2}, "messages[0].content[1]"),
    "chat streamed": (
        "/v1/chat/completions",
        {"messages": [image_url()], "max_tokens": 2, "stream": True},
        "messages[0].content[1]",
    ),
    "chat system message": (
        "/v1/chat/completions",
        {"messages": [image_url("system"), {"role": "user", "content": "hi"}], "max_tokens": 2},
        "messages[0].content[1]",
    ),
    "chat tool result": (
        "/v1/chat/completions",
        {
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
                {"role": "tool", "tool_call_id": "c1", "content": [{"type": "image_url", "image_url": {"url": URI}}]},
            ],
            "max_tokens": 2,
        },
        "messages[2].content[0]",
    ),
    "responses": ("/v1/responses", {"input": [input_image()], "max_output_tokens": 16}, "input[0].content[1]"),
    "responses streamed": (
        "/v1/responses",
        {"input": [input_image()], "max_output_tokens": 16, "stream": True},
        "input[0].content[1]",
    ),
    "responses tool output": (
        "/v1/responses",
        {
            "input": [
                {"role": "user", "content": "hi"},
                {"type": "function_call", "call_id": "c1", "name": "look", "arguments": "{}"},
                {
                    "type": "function_call_output",
                    "call_id": "c1",
                    "output": [{"type": "input_image", "image_url": URI}],
                },
            ],
            "max_output_tokens": 16,
        },
        "input[2].output[0]",
    ),
    "decisions": (
        "/v1/decisions",
        {
            "input": [input_image("First."), input_image("Second.")],
            "questions": [{"type": "predicate", "name": "ok", "instructions": "Is it fine?"}],
        },
        "input[0].content[1]",
    ),
    "moderations parts": (
        "/v1/moderations",
        {"input": [{"type": "text", "text": "Look:"}, {"type": "image_url", "image_url": {"url": URI}}]},
        "input",
    ),
    "moderations data URI": ("/v1/moderations", {"input": ["Hello.", URI]}, "input[1]"),
    "rerank": ("/v1/rerank", {"query": "a red square", "documents": ["a blue circle", URI]}, "documents[1]"),
    "rerank root": ("/rerank", {"query": "a red square", "documents": [{"text": URI}]}, "documents[0]"),
    "rerank v2": ("/v2/rerank", {"query": "a red square", "documents": ["x", "y", URI]}, "documents[2]"),
    "score": ("/v1/score", {"text_1": "a red square", "text_2": ["a blue circle", URI]}, "text_2[1]"),
}


@pytest.fixture(scope="module")
def fronted(demo_root):
    """`serve --engine vllm` in front of a scripted replica: (blink's URL, the replica's URL)."""
    replica, proc = start_scripted("images", "--delay-ms", "5")
    try:
        with running(blink_serve("--engine", "vllm", "--engine-url", replica), demo_root, name="serve-vllm-img") as url:
            yield url, replica
    finally:
        stop_group(proc)


def served(replica: str) -> int:
    """The requests the scripted replica has answered (completions, streamed or not)."""
    return httpx.get(replica + "/script", timeout=10).json()["served"]


@pytest.mark.parametrize("case", list(OPENAI_SHAPED))
def test_an_image_is_openais_400_before_the_replica(fronted, case):
    url, replica = fronted
    path, body, param = OPENAI_SHAPED[case]
    before = served(replica)
    r = httpx.post(url + path, json={"model": "demo", **body}, timeout=60)
    assert r.status_code == 400, r.text
    assert r.headers["content-type"].startswith("application/json"), r.headers  # a refusal, not a stream
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "images_unsupported", error
    assert error["param"] == param and "text only" in error["message"], error
    if path.endswith(("rerank", "score")):  # Jina's and Cohere's clients read `detail`
        assert r.json()["detail"] == error["message"] and error["message"].startswith(param)
    assert served(replica) == before


SYSTEMONE_SHAPED = {
    "assets": {
        "state": "Look: <image:a>",
        "assets": {"<image:a>": {"type": "image", "format": "png", "data_base64": DATA}},
    },
    "a data-URI state": {"state": URI},
    "a data URI inside a JSON state": {"state": {"photo": URI, "note": "the parcel"}},
}


@pytest.mark.parametrize("path", ["/v1/systemone", "/v1/decisions"])
@pytest.mark.parametrize("case", list(SYSTEMONE_SHAPED))
def test_an_image_is_system_ones_422_before_the_replica(fronted, path, case):
    url, replica = fronted
    before = served(replica)
    r = httpx.post(url + path, json={**SYSTEMONE_SHAPED[case], "questions": QUESTIONS}, timeout=60)
    assert r.status_code == 422, r.text
    body = r.json()
    assert "text only" in body["error"] and body["detail"][0]["type"] == "images_unsupported", body
    assert served(replica) == before


def test_a_multipart_image_is_system_ones_422_before_the_replica(fronted):
    url, replica = fronted
    before = served(replica)
    request = {"state": "Look: <image:asset-0>", "questions": QUESTIONS}
    files = {
        "request": (None, json.dumps(request), "application/json"),
        "asset-0": ("asset-0", png(), "image/png"),
    }
    r = httpx.post(url + "/v1/systemone", files=files, timeout=60)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["type"] == "images_unsupported"
    assert served(replica) == before


def test_an_image_is_an_mcp_tool_error_before_the_replica(fronted):
    url, replica = fronted
    before = served(replica)
    result = mcp_call(url + "/mcp", lambda s: s.call_tool("decide", {"state": URI, "questions": QUESTIONS}))
    assert result.isError
    text = result.content[0].text
    assert "422: " in text and "text only" in text, text
    assert served(replica) == before


def test_text_still_reaches_the_replica(fronted):
    """The refusals above are of images only: the same routes with text are answered by the replica."""
    url, replica = fronted
    before = served(replica)
    r = httpx.post(
        url + "/v1/rerank", json={"query": "a red square", "documents": ["a blue circle", "red"]}, timeout=60
    )
    assert r.status_code == 200, r.text
    r = httpx.post(url + "/v1/systemone", json={"state": "Look: a red square.", "questions": QUESTIONS}, timeout=60)
    assert r.status_code == 200, r.text
    assert served(replica) > before


def test_the_scorer_refuses_an_image_as_the_clients_fault(fronted):
    """The vLLM scorer's own backstop, should an image ever get past the checks: the request's error is a 4xx
    (`images_unsupported`), never an engine failure, and the replica is not called."""
    from blink.errors import InvalidRequest
    from blink.plan import Prompt, Read
    from blink.vllm import Replicas, VllmScorer

    _, replica = fronted
    before = served(replica)
    with Replicas([replica]) as replicas:
        scorer = VllmScorer(replicas)
        try:
            (scored,) = scorer.score([[Prompt([1, 2, 3], [Read(2, [5, 6])], images=["an image"])]])
        finally:
            scorer.close()
    assert isinstance(scored.error, InvalidRequest) and scored.error.status < 500, scored.error
    assert scored.error.kind == "images_unsupported" and scored.scores is None
    assert served(replica) == before
