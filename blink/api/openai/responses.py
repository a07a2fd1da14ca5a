"""`POST /v1/responses`: OpenAI's Responses wire over the same chat turn (blink.api.openai.chat.start: the model's
chat template, the same slots, admission and error shape), answered as a `response` object or as its events.

The request is read by blink.api.openai.responses_request (nothing is stored: `store` is answered `false`, and what
needs stored state is a 400 that says so); the `response` object and its items are made by
blink.api.openai.responses_output, whole, or as its events by blink.api.openai.responses_stream.
"""

from __future__ import annotations

from dataclasses import replace

from starlette.routing import Route

from blink.api.openai.chat import start
from blink.api.openai.constraints import responses_params
from blink.api.openai.generation import Reply, sse_response, whole
from blink.api.openai.protocol import WIRE, ChatRequest, require_model
from blink.api.openai.responses_output import Shape, output_of, reasoning_tokens, status_of
from blink.api.openai.responses_request import parse_responses
from blink.api.openai.responses_stream import events
from blink.context import Context
from blink.web.endpoint import Body, Call, Endpoint


def routes(ctx: Context) -> list[Route]:
    def check(call: Call) -> ChatRequest:
        """Before admission: the request parsed, its constraints compiled, its input servable by this model."""
        req = parse_responses(call.body)
        require_model(call.body, ctx.model_names())
        req.params = replace(req.params, **responses_params(call.body, req.tools))
        ctx.chats.check(req.messages)
        return req

    async def responses(call: Call):
        req = call.checked
        shape = Shape(ctx, call.body, req)
        stream, ids = await start(ctx, call, req)
        names = [t["function"]["name"] for t in req.tools] if req.tools else None
        reply = Reply.of_chat(ctx.chats, stream, ids, names, req.parallel_tool_calls, req.max_tool_calls)
        if not req.stream:
            got = await whole(reply)
            status = status_of(got.final, bool(got.calls), got.truncated)
            return shape.body(status, output_of(got, status), got.final, reasoning_tokens(shape.count, got.reasoning))
        return sse_response(call, events(shape, reply))

    endpoint = Endpoint(
        ctx,
        WIRE,
        responses,
        body=Body("responses requests"),
        check=check,
        admit="chat",
        cancel_on_disconnect=True,
    )
    return [Route("/v1/responses", endpoint, methods=["POST"])]
