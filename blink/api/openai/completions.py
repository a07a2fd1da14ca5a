"""`POST /v1/completions`: the legacy text-completion wire (llama-index's OpenAILike, litellm's `text_completion`).

One `prompt` (a string, or a list of token ids) is continued as it is, with no chat template, by the same
generator, slots and admission as chat (blink.api.openai.generation). One choice per request: a list of prompts,
`n` > 1, `best_of` > 1 and `echo: true` are 400s that say so, never a silent first-prompt-only answer.
`logprobs: N` (0-5) gives the legacy shape: `tokens`, `token_logprobs`, `top_logprobs` (N alternatives each) and
`text_offset`.
Streamed: `text_completion` chunks, a usage chunk when `stream_options.include_usage`, `data: [DONE]`.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any

from starlette.routing import Route

from blink.api.openai.chat import usage
from blink.api.openai.constraints import legacy_entries, legacy_logprobs
from blink.api.openai.generation import Content, Reply, as_blink_error, sse, sse_response, whole
from blink.api.openai.protocol import WIRE, bad, integer, render, require_model, sampling, streaming
from blink.context import Context
from blink.errors import EngineFailure
from blink.generate.chat_engine import ChatEnd
from blink.plan import GenerationParams
from blink.web.endpoint import Body, Call, Endpoint
from blink.web.streams import KEEPALIVE

log = logging.getLogger("blink")


@dataclass
class CompletionRequest:
    prompt: str | list[int]  # as sent: a string is tokenized once the request is admitted (capped count)
    max_tokens: int  # OpenAI's default: 16
    stream: bool
    include_usage: bool
    params: GenerationParams


def prompt_of(ctx: Context, prompt: Any) -> str | list[int]:
    """The prompt as it will be continued (no chat template): a non-empty string, or token ids checked against
    the vocabulary."""
    if isinstance(prompt, str):
        if not prompt:
            raise bad("`prompt` must not be empty", "prompt")
        return prompt
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        ctx.chats.check_ids(prompt)
        return list(prompt)
    if isinstance(prompt, list) and prompt:
        raise bad(
            "`prompt` must be one prompt (a string or a list of token ids): this server answers one prompt "
            "per request; send the others as their own requests",
            "prompt",
            kind="unsupported_value",
        )
    raise bad(
        "`prompt` must be a string or a non-empty list of token ids",
        "prompt",
        kind="missing" if prompt is None else "invalid_value",
    )


def parse(ctx: Context, body: Any) -> CompletionRequest:
    """Before admission: everything refusable without tokenizing."""
    if not isinstance(body, dict):
        raise bad("the body must be a JSON object with `model` and `prompt`")
    if body.get("model") is not None and not isinstance(body["model"], str):
        raise bad("`model` must be a string", "model")
    require_model(body, ctx.model_names())
    for name in ("n", "best_of"):
        value = integer(body, name, 1)
        if value is not None and value != 1:
            raise bad(
                f"`{name}` must be 1: this server returns one choice per request, got {value}",
                name,
                kind="unsupported_value",
            )
    if body.get("echo"):
        raise bad(
            "`echo: true` is not supported: the reply holds the completion only", "echo", kind="unsupported_value"
        )
    if body.get("suffix") is not None:
        raise bad(
            "`suffix` is not supported: this server does not fill in the middle", "suffix", kind="unsupported_value"
        )
    stream, include_usage = streaming(body)
    max_tokens = integer(body, "max_tokens", 1)
    params = replace(sampling(body), **legacy_logprobs(body))
    prompt = prompt_of(ctx, body.get("prompt"))
    return CompletionRequest(prompt, 16 if max_tokens is None else max_tokens, stream, include_usage, params)


def routes(ctx: Context) -> list[Route]:
    async def completions(call: Call):
        req: CompletionRequest = call.checked
        rendered = await ctx.chats.tokenize(call.ticket, req.prompt, req.max_tokens)
        reply = Reply(ctx.chats.start(call.held, rendered, req.params, call.caller, req.stream))
        head = {
            "id": "cmpl-" + uuid.uuid4().hex[:24],
            "object": "text_completion",
            "created": int(time.time()),
            "model": ctx.served_name,
        }
        logprobs = req.params.logprobs
        if not req.stream:
            got = await whole(reply)
            return {
                **head,
                "choices": [
                    {
                        "index": 0,
                        "text": got.content,
                        "logprobs": legacy_entries(got.logprobs) if logprobs else None,
                        "finish_reason": got.final.finish_reason,
                    }
                ],
                "usage": usage(got.final),
            }
        return sse_response(call, events(head, reply, req.include_usage, logprobs))

    endpoint = Endpoint(
        ctx,
        WIRE,
        completions,
        body=Body("completion requests"),
        check=lambda call: parse(ctx, call.body),
        admit="chat",
        cancel_on_disconnect=True,
    )
    return [Route("/v1/completions", endpoint, methods=["POST"])]


async def events(head: dict, reply: Reply, include_usage: bool, logprobs: bool) -> AsyncIterator[str]:
    offset = 0

    def chunk(text: str, finish: str | None = None, entries: list | None = None) -> str:
        legacy = legacy_entries(entries or [], offset) if logprobs and finish is None else None
        return sse({**head, "choices": [{"index": 0, "text": text, "logprobs": legacy, "finish_reason": finish}]})

    try:
        async for piece in reply:
            if piece is KEEPALIVE:
                yield ": keep-alive\n\n"
            elif isinstance(piece, Content) and (piece.text or piece.logprobs):
                yield chunk(piece.text, entries=piece.logprobs)
                offset += len(piece.text)
            elif isinstance(piece, ChatEnd):
                yield chunk("", piece.finish_reason)
                if include_usage:
                    yield sse({**head, "choices": [], "usage": usage(piece)})
    except Exception as exc:  # noqa: BLE001 - headers are sent: report in the stream, then end it cleanly
        error = as_blink_error(exc)
        if isinstance(error, EngineFailure):
            log.error("completion %s failed: %s", head["id"], error.message)
        yield sse(render(error)[1])
    yield "data: [DONE]\n\n"
