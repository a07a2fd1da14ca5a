"""The Space under test (`python app.py`, ci/tests/test_space_app.py and test_space_app_key.py): how it is started
(`APP`, `SPACE_ENV`) and the one request its `decide` tool is asked (`STATE`, `QUESTIONS`) through each client:
/v1/systemone (`systemone`), MCP (`mcp_decide`, `tool_body`) and @gradio/client (`js_decide`)."""

from __future__ import annotations

import sys

import httpx

from helpers.bodies import uncached
from helpers.clients import bearer, mcp_call, npm_installed
from helpers.servers import ROOT

APP = [sys.executable, str(ROOT / "app.py")]
SPACE_ENV = {"BLINK_MODEL": "demo", "BLINK_UI_CHAT_MAX_TOKENS": "6", "BLINK_MAX_OUTPUT_TOKENS": "64"}

QUESTIONS = {
    "spam": {"type": "noul", "instructions": "Is this message spam?"},
    "topic": {
        "type": "choice",
        "instructions": "What is it about?",
        "criteria": {"billing": "money, invoices", "shipping": None, "other": None},
    },
    "urgency": {"type": "score", "instructions": "How urgent is it?", "criteria": ["low", "medium", "high"]},
}
STATE = {"ticket": "My parcel never arrived and I was charged twice. Please help today."}


def systemone(url: str, key: str | None = None, **fields) -> dict:
    """The /v1/systemone body for STATE and QUESTIONS (and `fields`, e.g. x_calibration)."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    reply = httpx.post(
        url + "/v1/systemone", json={"state": STATE, "questions": QUESTIONS, **fields}, headers=headers, timeout=180
    )  # generous: the CI machine is shared
    assert reply.status_code == 200, reply.text
    return uncached(reply.json())


def mcp_decide(url: str, key: str | None = None):
    """The `decide` tool called over MCP with STATE and QUESTIONS, with `key` as the bearer key (None: no key)."""
    decide = {"state": STATE, "questions": QUESTIONS}
    return mcp_call(url + "/gradio_api/mcp/", lambda mcp: mcp.call_tool("decide", decide), bearer(key))


def tool_body(result) -> dict:
    """Gradio's MCP server sends the endpoint's return value as JSON text (space_tool.typed_mcp)."""
    import json

    assert not result.isError, result.content
    return json.loads(result.content[0].text)


def js_decide(url: str, key: str | None = None, **fields) -> dict:
    """@gradio/client (ci/js, pinned by its package-lock.json) calls decide with keyword arguments: STATE,
    QUESTIONS and `fields` (x_calibration)."""
    import json
    import subprocess

    folder = npm_installed()
    request = json.dumps({"state": STATE, "questions": QUESTIONS, **fields})
    argv = ["node", "decide.mjs", url, request, *([key] if key else [])]
    done = subprocess.run(argv, cwd=folder, capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])
