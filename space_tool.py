"""The Space as a tool: the one documented Gradio endpoint, `decide(state, questions)`.

gradio_client, @gradio/client and Gradio's MCP server (`launch(mcp_server=True)`: the tool `decide` at
/gradio_api/mcp/) all describe it from its type hints and its docstring (Google style `Args:`, which Gradio
reads per parameter), and it answers with exactly the body `POST /v1/systemone` returns (blink.systemone).
Every UI event is private, so this is the only endpoint `view_api()` lists and the only MCP tool.

Whose GPU it spends. The caller comes from the request's headers (`ctx.caller_of`): on ZeroGPU, `x-ip-token`,
which Hugging Face adds for a signed-in caller and which Gradio's MCP server passes on to the queued call,
so every caller (gradio_client, MCP, the UI) spends their own quota. On a GPU box with an API key, the knob
`gradio_api_needs_key` makes this endpoint (hence the Space's MCP tool) ask for the same
`Authorization: Bearer <key>` as /v1/*, so programs can't spend the GPU anonymously through Gradio; the UI
stays open to people (one Gradio queue, `queue_concurrency` at a time).
"""

from typing import Any

import gradio as gr

from blink.admission import ANONYMOUS, KEYED
from blink.context import Context
from blink.errors import BlinkError, Unauthorized
from blink.mcp_tool import DECIDE_DOC
from blink.systemone import decide_body

ARGS_DOC = """

Args:
    state: the text the questions are about, or a JSON value (object or array) describing it.
    questions: the questions by id, each {"type": "noul"|"choice"|"score", "instructions": "...", "criteria": ...}.

Returns:
    The /v1/systemone response body: {"model", "answers": {id: answer}, "usage": {"input_tokens", "output_tokens"}}.
"""


def error_of(error: BlinkError) -> gr.Error:
    """A wire error as Gradio shows it: its message, its HTTP status in the title (clients see both)."""
    return gr.Error(error.message, title=f"Error {error.status}", print_exception=False)


def decide_endpoint(ctx: Context, *, needs_key: bool = False):
    """The `decide` function Gradio serves: typed, documented, answering as /v1/systemone does."""

    async def decide(
        state: str | dict[str, Any] | list[Any], questions: dict[str, Any], request: gr.Request
    ) -> dict[str, Any]:
        headers = getattr(request, "headers", None) or {}
        caller = ctx.caller_of(request) if request is not None else None
        try:
            if needs_key and not ctx.auth.allows(headers.get("authorization")):
                raise Unauthorized("missing or invalid API key: send Authorization: Bearer <key>")
            # one call site for every decision asked through Gradio (the endpoint and its MCP tool): admitted by
            # decide_body; without the key (when one is set) a caller never takes the places kept for keyed traffic
            keyed = not ctx.auth.required or ctx.auth.allows(headers.get("authorization"))
            return await decide_body(
                ctx, {"state": state, "questions": questions}, caller, caller_class=KEYED if keyed else ANONYMOUS
            )
        except BlinkError as error:
            raise error_of(error) from None

    decide.__doc__ = DECIDE_DOC + ARGS_DOC
    return decide


def register(ctx: Context, *, needs_key: bool = False) -> None:
    """Inside the Blocks: the `decide` endpoint (and, with `mcp_server=True`, the MCP tool of the same name)."""
    gr.api(decide_endpoint(ctx, needs_key=needs_key), api_name="decide")
