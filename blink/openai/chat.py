"""`POST /v1/chat/completions`: validated and rendered in the main process (blink.chat.ChatEngine), generated
by `ctx.chat` (the engine's own `generate`, or the Space's `@spaces.GPU` wrapper of it) through one
blink.streams.GeneratorStream, as one JSON body or as server-sent events.

A turn holds a slot of the `chat` admission gate from before its body is read until its exchange ends
(blink.http lets go of it however it ends, a client that left before the first chunk included); with none
free it waits up to `chat_slot_wait_s`, then 529 with Retry-After from the expected wait.

With thinking on, the `<think>` block goes out as `reasoning_content` (message and delta), never in `content`.

Streaming: the `role` chunk goes out at once (before the GPU starts), `: keep-alive` comment lines while no
item has arrived for `ctx.sse_keepalive_s` seconds, `delta.reasoning_content` and `delta.content` chunks, tool
calls (parsed from the text by blink.toolcalls), the final chunk with `finish_reason`, a usage chunk when
`stream_options.include_usage`, and `data: [DONE]`. A failure after streaming began is sent as
`data: {"error": {...}}`, then `data: [DONE]`.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from starlette.concurrency import run_in_threadpool
from starlette.routing import Route

from ..chat import ChatEnd
from ..context import Context
from ..errors import EngineFailure
from ..http import Call, Endpoint
from ..streams import KEEPALIVE, GeneratorStream
from .constraints import chat_params
from .generation import Calls, Content, Reasoning, Reply, as_blink_error, launch, sse, sse_response, whole
from .protocol import WIRE, ChatRequest, bad, parse_chat, render

log = logging.getLogger("blink")


@dataclass
class Turn:
    """One completion: its id, time and model name, and the request it answers."""

    model: str
    request: ChatRequest
    id: str = field(default_factory=lambda: "chatcmpl-" + uuid.uuid4().hex[:24])
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def tool_names(self) -> list[str] | None:
        tools = self.request.tools
        return [t["function"]["name"] for t in tools] if tools else None


def usage(final: ChatEnd) -> dict:
    p, c = final.prompt_tokens, final.completion_tokens
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


async def start(ctx: Context, call: Call, req: ChatRequest) -> tuple[GeneratorStream, list[int]]:
    """Render the conversation (main process), then hold a slot and start generating it. Also the start of a
    Responses turn (blink.openai.responses), which is a chat turn on another wire."""
    async with call.ticket.preparing():
        rendered = await run_in_threadpool(ctx.chat_engine.prepare, req.messages, req.tools, req.max_tokens)
    params = {**req.params, "max_tokens": rendered.max_tokens}
    if rendered.images:
        params["images"] = rendered.images
    return launch(ctx, call, rendered.ids, params, req.stream), rendered.ids


def routes(ctx: Context) -> list[Route]:
    async def chat_completions(call: Call):
        if call.parts:
            raise bad("send chat requests as JSON (application/json), not multipart", kind="unsupported_media")
        req = parse_chat(call.body)
        req.params.update(await run_in_threadpool(chat_params, call.body, req.tools))
        stream, ids = await start(ctx, call, req)
        turn = Turn(ctx.served_name, req)
        reply = Reply.of_chat(ctx, stream, ids, turn.tool_names, req.parallel_tool_calls)
        if not req.stream:
            return await completion(turn, reply)
        return sse_response(call, stream_events(turn, reply))

    return [
        Route(
            "/v1/chat/completions",
            Endpoint(ctx, WIRE, chat_completions, cancel_on_disconnect=True, admit="chat"),
            methods=["POST"],
        )
    ]


def logprobs_field(entries: list | None) -> dict | None:
    return None if entries is None else {"content": entries, "refusal": None}


async def completion(turn: Turn, reply: Reply) -> dict:
    got = await whole(reply)
    message: dict = {"role": "assistant", "content": got.content}
    finish = got.final.finish_reason
    if got.calls:
        message = {"role": "assistant", "content": got.content or None, "tool_calls": got.calls}
        finish = "tool_calls"
    if reply.reasoning is not None:
        message["reasoning_content"] = got.reasoning or None
    return {
        "id": turn.id,
        "object": "chat.completion",
        "created": turn.created,
        "model": turn.model,
        "choices": [
            {"index": 0, "message": message, "logprobs": logprobs_field(got.logprobs), "finish_reason": finish}
        ],
        "usage": usage(got.final),
    }


async def stream_events(turn: Turn, reply: Reply) -> AsyncIterator[str]:
    base = {"id": turn.id, "object": "chat.completion.chunk", "created": turn.created, "model": turn.model}
    if turn.request.include_usage:
        base["usage"] = None

    def chunk(delta: dict, finish: str | None = None, logprobs: list | None = None) -> str:
        return sse(
            {
                **base,
                "choices": [
                    {"index": 0, "delta": delta, "logprobs": logprobs_field(logprobs), "finish_reason": finish}
                ],
            }
        )

    yield chunk({"role": "assistant", "content": ""})  # at once, before the GPU is even asked
    finish = None
    try:
        async for piece in reply:
            if piece is KEEPALIVE:
                yield ": keep-alive\n\n"
            elif isinstance(piece, Reasoning):
                yield chunk({"reasoning_content": piece.text})
            elif isinstance(piece, Content):
                yield chunk({"content": piece.text}, logprobs=piece.logprobs)
            elif isinstance(piece, Calls):
                yield chunk({"tool_calls": piece.calls})
                finish = "tool_calls"
            elif isinstance(piece, ChatEnd):
                yield chunk({}, finish or piece.finish_reason)
                if turn.request.include_usage:
                    yield sse({**base, "choices": [], "usage": usage(piece)})
    except Exception as exc:  # noqa: BLE001 - headers are sent: report in the stream, then end it cleanly
        error = as_blink_error(exc)
        if isinstance(error, EngineFailure):
            log.error("chat %s failed: %s", turn.id, error.message)
        yield sse(render(error)[1])
    yield "data: [DONE]\n\n"
