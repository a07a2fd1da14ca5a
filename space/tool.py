"""The Space as a tool: the one documented Gradio endpoint, `decide(state, questions, x_calibration=None)`.

gradio_client, @gradio/client and Gradio's MCP server (`launch(mcp_server=True)`: the tool `decide` at
/gradio_api/mcp/) all describe it from its type hints and its docstring (Google style `Args:`, which Gradio
reads per parameter), and it answers with exactly the body `POST /v1/systemone` returns (blink.api.systemone).
Every UI event is private, so this is the only endpoint `view_api()` lists and the only MCP tool.

`x_calibration` is optional and last, so a call with `state` and `questions` alone is answered as it always was
(with the server's default): gradio_client, @gradio/client and Gradio's MCP server fill a left-out argument in with
its default themselves; Gradio's direct REST paths (`/gradio_api/run/decide`, `/gradio_api/call/decide`) don't, so
`Blocks` does it for them. It is checked as `/v1/systemone` checks it (a value it does not take is the wire's 422).

Whose GPU it spends. The caller comes from the request's headers (`ctx.caller_of`): on ZeroGPU, `x-ip-token`,
which Hugging Face adds for a signed-in caller and which Gradio's MCP server passes on to the queued call,
so every caller (gradio_client, MCP, the UI) spends their own quota. On a GPU box with an API key, the knob
`gradio_api_needs_key` makes this endpoint (hence the Space's MCP tool) ask for the same
`Authorization: Bearer <key>` as /v1/*, so programs can't spend the GPU anonymously through Gradio; the UI
stays open to people. `gradio_ui_needs_key` closes the UI too (Gradio's login, the key as password): a logged-in
caller has shown the key, so gradio_client logs in (`Client(url, auth=(name, key))`) or sends the header.

What MCP clients read (`typed_mcp`, once Gradio has launched its MCP server). Gradio describes `questions` from its
type hint as a free-form object and sends a dict result as its Python repr; programs need the tool's schemas and
JSON. So Gradio's MCP server publishes `decide` with the schemas the standalone /mcp publishes
(blink.api.mcp.decide_schemas: every question typed, and `x_calibration`), sends the answer as JSON text, and also
as structured content. The Space serves the standalone /mcp as well (app.py), with the same key rules as /v1/*.

REST. Gradio answers any error of `POST /gradio_api/run/decide` (and `/gradio_api/api/decide`) with HTTP 500;
`auth.KeyFirst` refuses a call without the key (`gradio_api_needs_key`) there before Gradio sees it, with 401.

The endpoint runs outside Gradio's queue: blink's admission gate bounds it as it bounds /v1/systemone, and
Gradio's MCP server then calls it in-process with the MCP request itself (its headers: the caller's key and
ZeroGPU identity); a queued tool would be called through a loopback gradio_client that cannot pass the login.
"""

import json
from typing import Any

import gradio as gr

import auth
from blink.api.mcp import CALIBRATION_DOC, DECIDE_DOC, Calibration, decide_schemas
from blink.api.systemone import decide_body
from blink.context import Context
from blink.errors import BlinkError, Unauthorized
from blink.web.admission import ANONYMOUS, KEYED

ARGS_DOC = """

Args:
    state: the text the questions are about, or a JSON value (object or array) describing it.
    questions: the questions by id, each {"type": "noul"|"choice"|"score", "instructions": "...", "criteria": ...}.
    x_calibration: optional: "prior", "fitted", "fitted+prior" or "raw" (above); left out: the server's default.

Returns:
    The /v1/systemone response body: {"model", "answers": {id: answer}, "usage", "x_calibration": what was applied}.
"""
REQUIRED = 2  # decide's arguments without a default (state, questions); the rest are optional


def error_of(error: BlinkError) -> gr.Error:
    """A wire error as Gradio shows it: its message, its HTTP status in the title (clients see both)."""
    return gr.Error(error.message, title=f"Error {error.status}", print_exception=False)


def decide_endpoint(ctx: Context, *, needs_key: bool = False):
    """The `decide` function Gradio serves: typed, documented, answering as /v1/systemone does."""

    # `request` is Gradio's (it is no API argument and takes no input); `x_calibration` comes after it so that an
    # in-process call decide(state, questions, request) still reads as it did
    async def decide(
        state: str | dict[str, Any] | list[Any],
        questions: dict[str, Any],
        request: gr.Request,
        x_calibration: Calibration | None = None,
    ) -> dict[str, Any]:
        caller = ctx.caller_of(request) if request is not None else None
        keyed = auth.presented_key(ctx.auth, request)
        try:
            if needs_key and not keyed:
                raise Unauthorized("missing or invalid API key: send Authorization: Bearer <key>")
            # one call site for every decision asked through Gradio (the endpoint and its MCP tool): admitted by
            # decide_body; without the key (when one is set) a caller never takes the places kept for keyed traffic
            body = {"state": state, "questions": questions}
            if x_calibration is not None:  # left out: the server's default, as when the field is not sent
                body["x_calibration"] = x_calibration
            return await decide_body(
                ctx,
                body,
                caller=caller,
                caller_class=KEYED if keyed else ANONYMOUS,
            )
        except BlinkError as error:
            raise error_of(error) from None

    decide.__doc__ = DECIDE_DOC + CALIBRATION_DOC + ARGS_DOC
    return decide


class Blocks(gr.Blocks):
    """The Space's Blocks: a direct REST call of `decide` (`{"data": [state, questions]}` on `/gradio_api/run/decide`
    or `/gradio_api/call/decide`) may leave its optional last arguments out, as gradio_client, @gradio/client and
    MCP calls may; Gradio itself would refuse such a call (its error: too few input values, answered 500)."""

    async def preprocess_data(self, block_fn, inputs, state, explicit_call=False):
        return await super().preprocess_data(block_fn, with_defaults(block_fn, inputs), state, explicit_call)


def with_defaults(block_fn, inputs):
    """`decide`'s inputs with the optional arguments left out filled in with their defaults (the endpoint's `gr.Api`
    inputs hold them); anything else, and a call without the required arguments, as given."""
    if block_fn.api_name != "decide" or not isinstance(inputs, list) or len(inputs) < REQUIRED:
        return inputs
    return [*inputs, *(block.value for block in block_fn.inputs[len(inputs) :])]


def register(ctx: Context, *, needs_key: bool = False) -> None:
    """Inside the Blocks: the `decide` endpoint (and, with `mcp_server=True`, the MCP tool of the same name), outside
    Gradio's queue (the module's docstring says why)."""
    gr.api(decide_endpoint(ctx, needs_key=needs_key), api_name="decide", queue=False)


# --- what MCP clients read ---------------------------------------------------------------------------------
def typed_mcp(mcp_server) -> None:
    """Gradio's MCP server (`demo.mcp_server_obj`, after launch): `decide` published with the standalone /mcp's
    input and output schemas, answered as JSON text and as structured content."""
    from mcp import types

    input_schema, output_schema = decide_schemas()
    server = mcp_server.mcp_server
    list_tools, call_tool = (
        server.request_handlers[types.ListToolsRequest],
        server.request_handlers[types.CallToolRequest],
    )

    def is_decide(name: str) -> bool:
        return mcp_server.tool_to_endpoint.get(name) == "/decide"

    async def typed_list_tools(request):
        result = await list_tools(request)
        for tool in result.root.tools:  # the same objects the SDK keeps to validate calls by
            if is_decide(tool.name):
                tool.inputSchema, tool.outputSchema = input_schema, output_schema
        return result

    async def json_call_tool(request):
        result = await call_tool(request)
        answer = result.root
        if is_decide(request.params.name) and not answer.isError and len(answer.content) == 1:
            try:
                answer.structuredContent = json.loads(answer.content[0].text)
            except (AttributeError, ValueError):
                pass
        return result

    postprocess = mcp_server.postprocess_output_data

    def json_output(data, root_url):
        if isinstance(data, list) and data and all(isinstance(value, dict) for value in data):
            return [types.TextContent(type="text", text=json.dumps(value, ensure_ascii=False)) for value in data]
        return postprocess(data, root_url)

    server.request_handlers[types.ListToolsRequest] = typed_list_tools
    server.request_handlers[types.CallToolRequest] = json_call_tool
    mcp_server.postprocess_output_data = json_output
