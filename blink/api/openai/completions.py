"""`POST /v1/completions`: the legacy text-completion wire (llama-index's OpenAILike, litellm's `text_completion`).

`prompt` (a string, a list of token ids, or a list of either: at most `max_prompts`) is continued as it is, with
no chat template, by the same generator, slots and admission as chat (blink.api.openai.generation): one choice
per prompt, in order (`index`). `n` > 1, `best_of` > 1 and `suffix` are 400s that say so.
`logprobs: N` (0-5) gives the legacy shape: `tokens`, `token_logprobs`, `top_logprobs` (N alternatives each) and
`text_offset`. `echo: true` puts the prompt before the completion, its tokens' logprobs too, and allows
`max_tokens: 0`; vLLM's `prompt_logprobs: N` adds its per-token shape (blink.api.openai.echo: loglikelihood
evaluation).
Streamed (one prompt, no echo): `text_completion` chunks, a usage chunk when `stream_options.include_usage`,
`data: [DONE]`.
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
from blink.api.openai.echo import (
    echoed_entries,
    greedy_step,
    prompt_logprobs_of,
    prompts_of,
    vllm_prompt_logprobs,
)
from blink.api.openai.generation import Content, Reply, as_blink_error, sse, sse_response, whole
from blink.api.openai.protocol import WIRE, bad, integer, render, require_model, sampling, streaming
from blink.context import Context
from blink.errors import EngineFailure
from blink.generate.chat_engine import ChatEnd, Rendered
from blink.plan import GenerationParams
from blink.web.endpoint import Body, Call, Endpoint
from blink.web.streams import KEEPALIVE

log = logging.getLogger("blink")


@dataclass
class CompletionRequest:
    prompts: list[str | list[int]]  # as sent: strings are tokenized once the request is admitted (capped count)
    listed: bool  # `prompt` came as a list of prompts: errors name the prompt's index
    max_tokens: int  # OpenAI's default: 16; 0 only with `echo`
    stream: bool
    include_usage: bool
    params: GenerationParams
    echo: bool = False
    prompt_logprobs: int | None = None  # vLLM's: alternatives per prompt token

    @property
    def scores_prompt(self) -> bool:
        return (self.echo and self.params.logprobs) or self.prompt_logprobs is not None

    @property
    def scores_only(self) -> bool:
        """Nothing to generate past what the prompts' own pass gives (loglikelihood): decision work, one pass on the
        compute thread, admitted as that, a place per prompt; a generation holds a chat slot, one prompt at a time."""
        p = self.params
        greedy_one = self.max_tokens == 1 and p.temperature == 0 and not p.stop
        return self.scores_prompt and (self.max_tokens == 0 or greedy_one)

    def greedy_one(self, rendered: Rendered) -> bool:
        """The one token to generate is the most likely after the prompt: read from the prompt's own pass."""
        p = self.params
        return self.scores_prompt and rendered.max_tokens == 1 and p.temperature == 0 and not p.stop


def flag(body: dict, name: str) -> bool:
    value = body.get(name, False)
    if value is None or isinstance(value, bool):
        return bool(value)
    raise bad(f"`{name}` must be a boolean", name)


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
                f"`{name}` must be 1: this server returns one choice per prompt, got {value}",
                name,
                kind="unsupported_value",
            )
    if body.get("suffix") is not None:
        raise bad(
            "`suffix` is not supported: this server does not fill in the middle", "suffix", kind="unsupported_value"
        )
    echo = flag(body, "echo")
    stream, include_usage = streaming(body)
    max_tokens = integer(body, "max_tokens", 0)
    if max_tokens == 0 and not echo:
        raise bad("`max_tokens` must be at least 1 (0 only with `echo: true`, to score the prompt)", "max_tokens")
    params = replace(sampling(body), **legacy_logprobs(body), eos_entry=echo)
    prompts, listed = prompts_of(body.get("prompt"), ctx.chats.check_ids, ctx.limits.max_prompts)
    prompt_logprobs = prompt_logprobs_of(body)
    if stream and (len(prompts) > 1 or echo or prompt_logprobs is not None):
        raise bad(
            "`stream: true` takes one prompt without `echo` or `prompt_logprobs`: send the others unstreamed",
            "stream",
            kind="unsupported_value",
        )
    max_tokens = 16 if max_tokens is None else max_tokens
    return CompletionRequest(prompts, listed, max_tokens, stream, include_usage, params, echo, prompt_logprobs)


def check_request_tokens(rendered: list[Rendered], limit: int) -> None:
    total = sum(len(r.ids) for r in rendered)
    if total > limit:
        raise bad(
            f"the prompts are {total} tokens together; this server's limit is {limit} per request. Send them in "
            "several requests.",
            "prompt",
            kind="context_length_exceeded",
        )


def routes(ctx: Context) -> list[Route]:
    tokenizer = ctx.chats.tokenizer
    engine = ctx.chats.engine

    async def choice_of(call: Call, req: CompletionRequest, index: int, rendered: Rendered, scored) -> tuple:
        """One prompt's choice and the tokens generated for it."""
        text, entries, finish, produced, top = "", [], "length", 0, req.params.top_logprobs
        if req.greedy_one(rendered):
            text, entry, finish = greedy_step(scored, tokenizer, engine.hidden_ids, set(engine.eos_ids), top)
            entries, produced = [entry], int(finish == "length")
        elif rendered.max_tokens:
            got = await whole(Reply(ctx.chats.start(call.held, rendered, req.params, call.caller, False)))
            text, entries, finish = got.content, got.logprobs or [], got.final.finish_reason
            produced = got.final.completion_tokens
        choice = {"index": index, "text": text, "logprobs": None, "finish_reason": finish}
        if req.echo:
            prompt = req.prompts[index]
            echoed = prompt if isinstance(prompt, str) else tokenizer.decode(prompt, skip_special_tokens=False)
            choice["text"] = echoed + text
            if req.params.logprobs:
                choice["logprobs"] = legacy_entries(echoed_entries(tokenizer, rendered.ids, scored, top) + entries)
        elif req.params.logprobs:
            choice["logprobs"] = legacy_entries(entries)
        if req.prompt_logprobs is not None:
            choice["prompt_logprobs"] = vllm_prompt_logprobs(tokenizer, rendered.ids, scored, req.prompt_logprobs)
        return choice, produced

    async def completions(call: Call):
        req: CompletionRequest = call.checked
        rendered = await ctx.chats.tokenize_all(call.ticket, req.prompts, req.max_tokens, req.listed)
        check_request_tokens(rendered, ctx.limits.max_request_tokens)
        head = {
            "id": "cmpl-" + uuid.uuid4().hex[:24],
            "object": "text_completion",
            "created": int(time.time()),
            "model": ctx.served_name,
        }
        if req.stream:
            reply = Reply(ctx.chats.start(call.held, rendered[0], req.params, call.caller, True))
            return sse_response(call, events(head, reply, req.include_usage, req.params.logprobs))
        scored = [None] * len(rendered)
        if req.scores_prompt:
            top = max(req.params.top_logprobs, req.prompt_logprobs or 0)
            try:
                ranks = req.prompt_logprobs is not None
                scored = await ctx.chats.prompt_logprobs([r.ids for r in rendered], top, call.caller, ranks)
            except Exception as exc:  # noqa: BLE001 - the backend's failure, in the wire's shape
                raise as_blink_error(exc) from None
        choices, produced = [], 0
        for index, (r, s) in enumerate(zip(rendered, scored)):
            choice, n = await choice_of(call, req, index, r, s)
            choices.append(choice)
            produced += n
        prompt_tokens = sum(len(r.ids) for r in rendered)
        total = prompt_tokens + produced
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": produced, "total_tokens": total}
        if req.scores_prompt:  # vLLM's and OpenAI's field: the prompt tokens a saved prefix state spared
            usage["prompt_tokens_details"] = {"cached_tokens": sum(s.cached_tokens for s in scored)}
        return {**head, "choices": choices, "usage": usage}

    endpoint = Endpoint(
        ctx,
        WIRE,
        completions,
        body=Body("completion requests"),
        check=lambda call: parse(ctx, call.body),
        admit=lambda req: "decide" if req.scores_only else "chat",
        units=lambda req: len(req.prompts) if req.scores_only else 1,
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
