"""The Space's two MCP endpoints, with a real `mcp` client and with the MCP Inspector's CLI (npm,
`@modelcontextprotocol/inspector --cli`, pinned by ci/js/inspector/package-lock.json): Gradio's `/gradio_api/mcp/`
and blink's own `/mcp` (the standalone server's FastMCP app, served by the Space too). Both publish `decide` with
the same typed input schema (every question's `type`, `instructions`, `criteria`; the optional `x_calibration`) and
an output schema, and answer with JSON text and structured content equal to the `/v1/systemone` body. The key
rules: `/mcp` asks for the /v1 key when one is set; Gradio's tool and REST path only with
`BLINK_GRADIO_API_NEEDS_KEY`, and the REST path refuses with 401, not 500."""

from __future__ import annotations

import json
import subprocess

import httpx
import pytest

from helpers import APP, QUESTIONS, ROOT, STATE, assert_close, mcp_call, npm_installed, running, systemone, uncached

KEY = "sk-space-mcp-Kq72-unusual"
SPACE_ENV = {"BLINK_MODEL": "demo", "BLINK_MAX_OUTPUT_TOKENS": "64"}
ENDPOINTS = ["/mcp", "/gradio_api/mcp/"]


@pytest.fixture(scope="module")
def space(demo_root):
    with running(APP, demo_root, env=SPACE_ENV, name="space-mcp") as url:
        yield url


@pytest.fixture(scope="module")
def keyed_space(demo_root):
    env = {**SPACE_ENV, "BLINK_API_KEY": KEY, "BLINK_GRADIO_API_NEEDS_KEY": "true"}
    with running(APP, demo_root, env=env, name="space-mcp-keyed") as url:
        yield url


async def list_and_call(mcp):
    tools = (await mcp.list_tools()).tools
    result = await mcp.call_tool("decide", {"state": STATE, "questions": QUESTIONS})
    bad = await mcp.call_tool("decide", {"state": "x", "questions": {"q": {"type": "maybe", "instructions": "?"}}})
    return tools, result, bad


async def call_raw(mcp):
    return await mcp.call_tool("decide", {"state": STATE, "questions": QUESTIONS, "x_calibration": "raw"})


def test_both_endpoints_publish_a_typed_tool_and_answer_json(space):
    expected, expected_raw = systemone(space), systemone(space, x_calibration="raw")
    schemas = {}
    for path in ENDPOINTS:
        tools, result, bad = mcp_call(space + path, list_and_call)
        (tool,) = [t for t in tools if t.name == "decide"]
        question = tool.inputSchema["$defs"]["DecisionQuestion"]
        assert tool.inputSchema["properties"]["questions"]["additionalProperties"] == {
            "$ref": "#/$defs/DecisionQuestion"
        }
        assert question["properties"]["type"]["enum"] == ["noul", "choice", "score"]
        assert set(question["properties"]) == {"type", "instructions", "criteria"}
        assert question["required"] == ["type", "instructions"] and question["additionalProperties"] is False
        assert tool.outputSchema and tool.outputSchema["type"] == "object"
        schemas[path] = (tool.inputSchema, tool.outputSchema)
        assert not result.isError, result.content
        body = json.loads(result.content[0].text)  # JSON text a program can parse
        assert result.structuredContent == body
        assert_close(uncached(body), expected, path)
        assert bad.isError  # a question of an unknown type is refused by the schema, as a tool error
        raw = mcp_call(space + path, call_raw)
        assert not raw.isError
        assert_close(uncached(raw.structuredContent), expected_raw, path)
    # one tool, typed once, with the same optional `x_calibration` on both
    assert schemas["/mcp"] == schemas["/gradio_api/mcp/"]
    assert "x_calibration" in schemas["/mcp"][0]["properties"] and "x_calibration" not in schemas["/mcp"][0]["required"]


def test_the_key_rules_on_both_endpoints_and_the_rest_path(keyed_space):
    url = keyed_space
    # blink's /mcp: the /v1 key, 401 with WWW-Authenticate before any MCP session
    r = httpx.post(url + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, timeout=30)
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    keyed = {"Authorization": f"Bearer {KEY}"}
    expected = systemone(url, KEY)
    for path in ENDPOINTS:
        _, result, _ = mcp_call(url + path, list_and_call, keyed)
        assert_close(uncached(json.loads(result.content[0].text)), expected)
    # Gradio's MCP tool without the key: a tool error naming the key
    refused = mcp_call(
        url + "/gradio_api/mcp/", lambda mcp: mcp.call_tool("decide", {"state": "x", "questions": QUESTIONS})
    )
    assert refused.isError and "API key" in refused.content[0].text
    # Gradio's REST path: a refusal is a 4xx, not a 500
    payload = {"data": [STATE, QUESTIONS]}
    for path in ("/gradio_api/run/decide", "/gradio_api/api/decide/"):
        r = httpx.post(url + path, json=payload, timeout=30)
        assert r.status_code == 401 and "API key" in r.json()["error"], (path, r.status_code, r.text)
    r = httpx.post(url + "/gradio_api/run/decide", json=payload, headers=keyed, timeout=120)
    assert r.status_code == 200
    assert_close(uncached(r.json()["data"][0]), expected)


def inspector(*args: str) -> dict:
    folder = npm_installed(ROOT / "ci" / "js" / "inspector", timeout=600)
    cli = folder / "node_modules" / ".bin" / "mcp-inspector"
    done = subprocess.run([str(cli), "--cli", *args], cwd=folder, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr + done.stdout
    return json.loads(done.stdout)


def test_the_mcp_inspector_cli_on_both_endpoints(space):
    expected = systemone(space)
    for path in ENDPOINTS:
        listed = inspector(space + path, "--transport", "http", "--method", "tools/list")
        (tool,) = [t for t in listed["tools"] if t["name"] == "decide"]
        assert "x_calibration" in tool["inputSchema"]["properties"]
        assert tool["inputSchema"]["$defs"]["DecisionQuestion"]["properties"]["type"]["enum"] == [
            "noul",
            "choice",
            "score",
        ]
        assert "outputSchema" in tool
        called = inspector(
            space + path,
            "--transport",
            "http",
            "--method",
            "tools/call",
            "--tool-name",
            "decide",
            "--tool-arg",
            f"state={json.dumps(STATE)}",
            "--tool-arg",
            f"questions={json.dumps(QUESTIONS)}",
        )
        assert not called.get("isError"), called
        assert_close(uncached(json.loads(called["content"][0]["text"])), expected)
        assert_close(uncached(called["structuredContent"]), expected)
