"""The `decide` tool for agents, over MCP: the standalone server serves it at `/mcp`.

The `mcp` SDK's FastMCP describes the tool from its signature and docstring and serves the streamable HTTP
transport; blink adds only what a public server needs around it: the API key (checked before the MCP
session sees the request, answered 401 with `WWW-Authenticate: Bearer` as MCP clients expect), the
caller's identity, and the decision itself, which goes through the same `decide` the HTTP routes use (the
same limits, batcher and admission). The Space serves this /mcp too, and the same tool through Gradio's own MCP
server, from its `decide` Gradio endpoint, with the same description (`DECIDE_DOC`) and schemas (`decide_schemas`).

No `from __future__ import annotations` here: FastMCP reads the tool's annotations at run time.

Stateless and JSON-only: every tool call is one HTTP request and one answer, so nothing is kept between
requests and any replica can serve any call.
"""

import contextlib
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

from mcp.server.fastmcp import Context, FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import BaseModel, ConfigDict, Field

from blink.errors import BlinkError
from blink.logs import quiet_mcp

DECIDE_DOC = """Answer typed questions about a text or JSON state with a probability for every option.

One forward pass of a decision model reads every question at once; nothing is generated. Question types:
- `noul`: a yes/no question; answered true or false with the probability of each.
- `choice`: pick one of named options (`criteria` maps each option name to a description, or null).
- `score`: an ordered scale (`criteria` lists the levels, lowest first); answered with the expected level.

Returns the System One response: `answers` maps each question id to its answer (noul: P(true); choice: the
chosen option, its confidence and every option's probability; score: the expected level, 0 = lowest, with
its confidence and each level's probability), and `usage` counts the tokens read."""

# the optional argument (the standalone tool's and the Space's Gradio `decide`'s)
CALIBRATION_DOC = """

`x_calibration` (optional): "prior" divides each answer by the question's answer on content-free states (a bias
towards some options whatever the text says is removed), "fitted" applies the server's fitted temperatures,
"fitted+prior" both, "raw" neither; by default the server's own choice."""


STATE_DOC = "the text the questions are about, or a JSON value (object or array) describing it"
QUESTIONS_DOC = 'the questions by id, each {"type": "noul"|"choice"|"score", "instructions": "...", "criteria": ...}'


class DecisionQuestion(BaseModel):
    """One question: its type, what to decide, and (choice, score) the options or levels."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["noul", "choice", "score"] = Field(
        description="noul (yes/no), choice (named options) or score (ordered levels)"
    )
    instructions: str = Field(description="what to decide, e.g. 'Is this message spam?'")
    criteria: dict[str, str | None] | list[str] | None = Field(
        default=None,
        description="choice: {option name: description or null}; score: [level, ...] lowest first; "
        'noul: optional {"true": ..., "false": ...} descriptions',
    )


Decide = Callable[[dict, Any], Awaitable[dict]]


Calibration = Literal["calibrated", "raw", "fitted", "prior", "fitted+prior"]


def decision_body(state: Any, questions: dict[str, Any], x_calibration: str | None = None) -> dict:
    """The System One request body for a tool call (questions as models or plain dicts)."""

    def plain(question):
        return question.model_dump(exclude_none=True) if isinstance(question, BaseModel) else question

    body = {"state": state, "questions": {qid: plain(q) for qid, q in questions.items()}}
    if x_calibration is not None:
        body["x_calibration"] = x_calibration
    return body


def build_mcp(decide: Decide, caller_of: Callable[[Any], Any], name: str):
    """A FastMCP server with the `decide` tool; `decide(body, caller)` returns the System One response body."""
    # Keys travel as bearer headers, never as cookies, so a rebinding page gains nothing: any Host is served.
    server = FastMCP(
        name,
        instructions=DECIDE_DOC,
        stateless_http=True,
        json_response=True,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )

    @server.tool(name="decide", description=DECIDE_DOC + CALIBRATION_DOC, structured_output=True)
    async def decide_tool(
        state: Annotated[str | dict[str, Any] | list[Any], Field(description=STATE_DOC)],
        questions: Annotated[dict[str, DecisionQuestion], Field(description=QUESTIONS_DOC)],
        ctx: Context,
        x_calibration: Calibration | None = None,
    ) -> dict[str, Any]:
        request = ctx.request_context.request
        try:
            body = decision_body(state, questions, x_calibration)
            return await decide(body, caller_of(request) if request else None)
        except BlinkError as error:  # the same message the HTTP wire gives, as a tool error the agent can read
            raise ToolError(f"{error.status}: {error.message}") from None

    return server


def decide_schemas() -> tuple[dict, dict | None]:
    """The `decide` tool's input and output schemas exactly as FastMCP publishes them at /mcp (the Space's Gradio
    MCP server publishes the same ones: its `decide(state, questions, x_calibration=None)` takes the same arguments)."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    async def noop(body, caller):  # never called: only the description is read
        return body

    server = build_mcp(noop, lambda request: None, "blink")
    with ThreadPoolExecutor(1) as pool:  # its own event loop, whether or not the caller runs one
        (tool,) = pool.submit(asyncio.run, server.list_tools()).result()
    return tool.inputSchema, tool.outputSchema


class McpEndpoint:
    """The ASGI endpoint at /mcp: the key is checked first, then FastMCP's session manager answers."""

    def __init__(self, server, allows: Callable[[str | None], bool]):
        quiet_mcp()  # this server's log lines and Gradio's MCP server's (the same library's loggers)
        server.streamable_http_app()  # creates the session manager the endpoint hands requests to
        self.manager = server.session_manager
        self.allows = allows

    async def __call__(self, scope, receive, send):
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if not self.allows(headers.get("authorization")):
            from starlette.responses import JSONResponse

            body = {"error": "missing or invalid API key: send Authorization: Bearer <key>"}
            await JSONResponse(body, 401, {"WWW-Authenticate": "Bearer"})(scope, receive, send)
            return
        await self.manager.handle_request(scope, receive, send)

    @contextlib.asynccontextmanager
    async def running(self):
        """The session manager's task group: entered once for the server's lifetime (its lifespan)."""
        async with self.manager.run():
            yield
