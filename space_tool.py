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
stays open to people. `gradio_ui_needs_key` closes the UI too (Gradio's login, the key as password): a logged-in
caller has shown the key, so gradio_client logs in (`Client(url, auth=(name, key))`) or sends the header.

The endpoint runs outside Gradio's queue: blink's admission gate bounds it as it bounds /v1/systemone, and
Gradio's MCP server then calls it in-process with the MCP request itself (its headers: the caller's key and
ZeroGPU identity); a queued tool would be called through a loopback gradio_client that cannot pass the login.
"""

from typing import Any

import gradio as gr

from blink.admission import ANONYMOUS, KEYED
from blink.auth import ApiKey
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
        caller = ctx.caller_of(request) if request is not None else None
        keyed = presented_key(ctx.auth, request)
        try:
            if needs_key and not keyed:
                raise Unauthorized("missing or invalid API key: send Authorization: Bearer <key>")
            # one call site for every decision asked through Gradio (the endpoint and its MCP tool): admitted by
            # decide_body; without the key (when one is set) a caller never takes the places kept for keyed traffic
            return await decide_body(
                ctx,
                {"state": state, "questions": questions},
                caller=caller,
                caller_class=KEYED if keyed else ANONYMOUS,
            )
        except BlinkError as error:
            raise error_of(error) from None

    decide.__doc__ = DECIDE_DOC + ARGS_DOC
    return decide


def presented_key(auth: ApiKey, request) -> bool:
    """Whether a Gradio caller has shown the API key (always, when none is set): `Authorization: Bearer <key>`, or
    a login to the UI, whose only password is the key (`gradio_ui_needs_key`; Gradio names the request's user only
    after its login). `request` is a gr.Request, or the Starlette request of an MCP call (it has no user name)."""
    if not auth.required or getattr(request, "username", None):
        return True
    headers = getattr(request, "headers", None) or {}
    return auth.allows(headers.get("authorization"))


def register(ctx: Context, *, needs_key: bool = False) -> None:
    """Inside the Blocks: the `decide` endpoint (and, with `mcp_server=True`, the MCP tool of the same name), outside
    Gradio's queue (the module's docstring says why)."""
    gr.api(decide_endpoint(ctx, needs_key=needs_key), api_name="decide", queue=False)
