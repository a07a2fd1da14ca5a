"""`POST /v1/chat/completions`: validated and rendered in the main process (blink.chat.ChatEngine), generated
by `ctx.chat` (the engine's own `generate`, or the Space's `@spaces.GPU` wrapper of it) through one
blink.streams.GeneratorStream, as one JSON body or as server-sent events.

A turn holds a slot of the `chat` admission gate from before its body is read until its exchange ends
(blink.http lets go of it however it ends, a client that left before the first chunk included); with none
free it waits up to `chat_slot_wait_s`, then 529 with Retry-After from the expected wait.

Streaming: the `role` chunk goes out at once (before the GPU starts), `: keep-alive` comment lines while no
item has arrived for `ctx.sse_keepalive_s` seconds, `delta.content` chunks, tool calls (parsed from the text
by blink.toolcalls), the final chunk with `finish_reason`, a usage chunk when `stream_options.include_usage`,
and `data: [DONE]`. A failure after streaming began is sent as `data: {"error": {...}}`, then `data: [DONE]`.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from starlette.concurrency import run_in_threadpool
from starlette.responses import StreamingResponse
from starlette.routing import Route

from ..chat import ChatEnd
from ..context import Context
from ..errors import BlinkError, EngineFailure
from ..http import Call, Endpoint
from ..streams import KEEPALIVE, GeneratorStream
from ..toolcalls import ToolStream, parse
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


def as_blink_error(exc: BaseException) -> BlinkError:
    if isinstance(exc, BlinkError):
        return exc
    return EngineFailure(f"generation failed: {type(exc).__name__}: {exc}", kind="generation_failed")


def usage(final: ChatEnd) -> dict:
    p, c = final.prompt_tokens, final.completion_tokens
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


def sse(obj) -> str:
    return "data: " + json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n\n"


def routes(ctx: Context) -> list[Route]:
    async def chat_completions(call: Call):
        if call.parts:
            raise bad("send chat requests as JSON (application/json), not multipart", kind="unsupported_media")
        req = parse_chat(call.body)
        async with call.ticket.preparing():
            rendered = await run_in_threadpool(ctx.chat_engine.prepare, req.messages, req.tools, req.max_tokens)
        params = {**req.params, "max_tokens": rendered.max_tokens}
        if rendered.images:
            params["images"] = rendered.images
        stream = GeneratorStream(lambda: ctx.chat(rendered.ids, params, call.caller),
                                 ctx.sse_keepalive_s if req.stream else None)
        call.held.push_async_callback(stream.aclose)
        turn = Turn(ctx.served_name, req)
        if not req.stream:
            return await completion(turn, stream)
        events = stream_events(turn, stream)
        call.held.push_async_callback(events.aclose)
        return StreamingResponse(events, media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    return [Route("/v1/chat/completions", Endpoint(ctx, WIRE, chat_completions, cancel_on_disconnect=True,
                                                  admit="chat"),
                  methods=["POST"])]


async def completion(turn: Turn, stream: GeneratorStream) -> dict:
    text, final = [], None
    try:
        async for item in stream:
            if isinstance(item, ChatEnd):
                final = item
            elif isinstance(item, str):
                text.append(item)
    except Exception as exc:  # noqa: BLE001 - the generator's failure, in the wire's shape
        raise as_blink_error(exc) from None
    if final is None:
        raise EngineFailure("generation ended without a result", kind="generation_failed")
    content = "".join(text)
    finish = final.finish_reason
    message: dict = {"role": "assistant", "content": content}
    if turn.tool_names:
        parsed = parse(content, turn.tool_names)
        if parsed.calls:
            message = {"role": "assistant", "content": parsed.content, "tool_calls": parsed.calls}
            finish = "tool_calls"
    return {"id": turn.id, "object": "chat.completion", "created": turn.created, "model": turn.model,
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
            "usage": usage(final)}


async def stream_events(turn: Turn, stream: GeneratorStream) -> AsyncIterator[str]:
    base = {"id": turn.id, "object": "chat.completion.chunk", "created": turn.created, "model": turn.model}
    if turn.request.include_usage:
        base["usage"] = None

    def chunk(delta: dict, finish: str | None = None) -> str:
        return sse({**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]})

    yield chunk({"role": "assistant", "content": ""})  # at once, before the GPU is even asked
    splitter = ToolStream(turn.tool_names) if turn.tool_names else None
    final = None
    try:
        async for item in stream:
            if item is KEEPALIVE:
                yield ": keep-alive\n\n"
            elif isinstance(item, ChatEnd):
                final = item
            else:
                out = splitter.feed(item) if splitter else item
                if out:
                    yield chunk({"content": out})
        if final is None:
            raise EngineFailure("generation ended without a result", kind="generation_failed")
        finish = final.finish_reason
        if splitter:
            parsed = splitter.finish()
            if parsed.content:
                yield chunk({"content": parsed.content})
            if parsed.calls:
                yield chunk({"tool_calls": parsed.calls})
                finish = "tool_calls"
        yield chunk({}, finish)
        if turn.request.include_usage:
            yield sse({**base, "choices": [], "usage": usage(final)})
    except Exception as exc:  # noqa: BLE001 - headers are sent: report in the stream, then end it cleanly
        error = as_blink_error(exc)
        if isinstance(error, EngineFailure):
            log.error("chat %s failed: %s", turn.id, error.message)
        yield sse(render(error)[1])
    yield "data: [DONE]\n\n"
