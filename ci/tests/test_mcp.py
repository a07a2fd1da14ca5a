"""MCP: a real `mcp` client lists and calls the `decide` tool on the standalone server (`/mcp`), with and
without a key; the answers are the ones `/v1/systemone` gives for the same body."""

from __future__ import annotations

import httpx
import pytest

from helpers import ServerProcess, assert_close, bearer, blink_serve, mcp_call, running, uncached

pytestmark = pytest.mark.e2e

QUESTIONS = {
    "spam": {"type": "noul", "instructions": "Is this message spam?"},
    "topic": {
        "type": "choice",
        "instructions": "What is it about?",
        "criteria": {"billing": "money, invoices", "shipping": None, "other": None},
    },
    "urgency": {"type": "score", "instructions": "How urgent is it?", "criteria": ["low", "medium", "high"]},
}
STATE = "My parcel never arrived and I was charged twice. Please help today."


def call(url: str, work, key: str | None = None):
    return mcp_call(url + "/mcp", work, bearer(key))


def test_decide_tool_is_listed_with_a_schema(server):
    tools = call(server, lambda s: s.list_tools()).tools
    assert [t.name for t in tools] == ["decide"]
    tool = tools[0]
    assert "probability" in tool.description
    props = tool.inputSchema["properties"]
    assert set(tool.inputSchema["required"]) == {"state", "questions"}
    assert "state" in props and "questions" in props


def test_decide_tool_answers_as_systemone_does(server):
    result = call(server, lambda s: s.call_tool("decide", {"state": STATE, "questions": QUESTIONS}))
    assert not result.isError, result.content
    body = result.structuredContent
    direct = httpx.post(server + "/v1/systemone", json={"state": STATE, "questions": QUESTIONS}, timeout=60).json()
    assert body["answers"].keys() == QUESTIONS.keys()
    assert_close(uncached(body), uncached(direct))  # the same engine, the same prompts: the same numbers (1e-6)


def test_a_bad_question_is_a_tool_error_naming_it(server):
    bad = {"pick": {"type": "choice", "instructions": "Pick one", "criteria": {}}}
    result = call(server, lambda s: s.call_tool("decide", {"state": STATE, "questions": bad}))
    assert result.isError
    text = result.content[0].text
    assert "422" in text and "pick" in text


def test_the_key_guards_mcp(keyed_server):
    # the client raises httpx's 401 inside an exception group (its task group's); the raw request below checks the
    # status and the challenge header themselves
    for key in (None, "wrong"):
        with pytest.raises(ExceptionGroup) as info:
            call(keyed_server, lambda s: s.list_tools(), key=key)
        assert info.group_contains(httpx.HTTPStatusError, match="401 Unauthorized"), info.value.exceptions
    reply = httpx.post(
        keyed_server + "/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Accept": "application/json, text/event-stream"},
        timeout=10,
    )
    assert reply.status_code == 401 and reply.headers["www-authenticate"] == "Bearer"
    tools = call(keyed_server, lambda s: s.list_tools(), key="sekret-key-123").tools
    assert [t.name for t in tools] == ["decide"]
    result = call(
        keyed_server, lambda s: s.call_tool("decide", {"state": STATE, "questions": QUESTIONS}), key="sekret-key-123"
    )
    assert not result.isError and result.structuredContent["answers"].keys() == QUESTIONS.keys()


NOISE = ["Terminating session: None", "StreamableHTTP session manager started", "flash-linear-attention"]


def test_the_log_says_nothing_that_means_nothing(demo_root):
    """With transformers' warnings on (the tests turn them off elsewhere) and MCP called twice: no MCP session line
    for a server without sessions, and no advice to install GPU kernels on a CPU; the rest of the log still flows."""
    env = {"TRANSFORMERS_VERBOSITY": "warning"}
    with running(blink_serve("--log-level", "info"), demo_root, env=env, name="serve-quiet") as url:
        for _ in range(2):
            call(url, lambda s: s.call_tool("decide", {"state": STATE, "questions": QUESTIONS}))
        log = ServerProcess(url).log_text()
    assert "blink serving" in log and "POST /mcp HTTP/1.1" in log
    assert [n for n in NOISE if n in log] == [], log[-3000:]
