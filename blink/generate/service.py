"""The chat service every chat entry point uses (chat completions, Responses, Completions, the UI's Chat tab):
check, render and count, generate. The wires keep only their own shapes.

The steps, in the request pipeline's order:
- `check(messages)` before the request is admitted: what can be refused without rendering (images on a text-only
  model), so a full server still answers it at once;
- `render(ticket, ...)` / `tokenize(ticket, ...)` once admitted, under the ticket's preparing bound: the chat
  template (or a raw prompt) tokenized with the count capped by the context window, and the output budget;
- `start(...)` the backend's generator (blink.backend) behind one blink.web.streams.GeneratorStream, closed when the
  exchange ends however it ends.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import AsyncExitStack
from dataclasses import replace
from typing import Any

from starlette.concurrency import run_in_threadpool

from blink.errors import InvalidRequest
from blink.generate.chat_engine import ChatEnd, ChatEngine, Rendered
from blink.generate.reasoning import opens_thinking
from blink.plan import GenerationParams
from blink.tokens import TokenCap, capped_tokens
from blink.web import metrics
from blink.web.streams import GeneratorStream


class ChatService:
    def __init__(self, engine: ChatEngine, backend, keepalive_s: float = 5.0, model_name: str = ""):
        self.engine = engine
        self.model_name = model_name  # the served name: the metrics' `model_name`
        self.backend = backend  # blink.backend.Backend
        self.keepalive_s = keepalive_s  # seconds without a token before a stream sends a keep-alive
        self.cap = TokenCap(engine.tokenizer)  # counts a raw prompt in time bounded by the context window

    @property
    def tokenizer(self):
        return self.engine.tokenizer

    @property
    def defaults(self) -> dict:
        """The sampling values a generation takes where its request sets none (`temperature`, `top_p`, `top_k`):
        the model's generation_config, else OpenAI's; every backend samples with these."""
        return dict(self.engine.defaults)

    # before admission ---------------------------------------------------------------------------------------
    def check(self, messages: list[dict]) -> None:
        """Refuse what no rendering could serve: image parts for a model that reads text only."""
        if self.engine.processor is not None:
            return
        for m in messages:
            for block in m.get("content") if isinstance(m.get("content"), list) else ():
                if isinstance(block, dict) and block.get("type") == "image":
                    raise InvalidRequest(
                        "this server's model reads text only: image parts are not accepted",
                        loc=["body", *block["loc"]],
                        kind="images_unsupported",
                    )

    def check_ids(self, ids: list[int], loc: tuple = ("prompt",)) -> None:
        """Token ids sent as a prompt (at `loc` in the body): each inside the vocabulary, which is the smaller of
        the tokenizer's and the model's embedding (a tokenizer may name a few ids past the model's rows)."""
        vocab = min(len(self.engine.tokenizer), self.engine.model.config.get_text_config().vocab_size)
        for i, token in enumerate(ids):
            if not 0 <= token < vocab:
                raise InvalidRequest(
                    f"token id {token} is outside the vocabulary (0-{vocab - 1})",
                    loc=["body", *loc, i],
                    kind="invalid_value",
                )

    # admitted: render and count under the preparing bound ----------------------------------------------------
    async def render(self, ticket, messages: list[dict], tools: list[dict] | None, max_tokens: int | None) -> Rendered:
        async with ticket.preparing():
            return await run_in_threadpool(self.engine.prepare, messages, tools, max_tokens)

    def render_sync(self, ticket, messages: list[dict], max_tokens: int | None) -> Rendered:
        with ticket.preparing_sync():
            return self.engine.prepare(messages, None, max_tokens)

    async def tokenize(self, ticket, prompt: str | list[int], max_tokens: int) -> Rendered:
        """A raw prompt (no chat template): a string tokenized with its count capped by the context window (a
        prompt past it is refused after tokenizing about the window's worth), or ids as they are."""
        async with ticket.preparing():
            return await run_in_threadpool(self._tokenize, prompt, max_tokens)

    async def tokenize_all(
        self, ticket, prompts: list[str | list[int]], max_tokens: int, listed: bool
    ) -> list[Rendered]:
        """`tokenize` for each prompt (`listed`: sent as a list, so errors name the prompt's index); `max_tokens`
        0 (echo: the prompt scored, nothing generated) asks only that the prompt fits the context window."""

        def every() -> list[Rendered]:
            return [
                self._tokenize(p, max_tokens, ("prompt", i) if listed else ("prompt",)) for i, p in enumerate(prompts)
            ]

        async with ticket.preparing():
            return await run_in_threadpool(every)

    async def prompt_logprobs(self, prompts: list[list[int]], top: int, caller: Any, ranks: bool) -> list:
        """Every token of each prompt scored by the backend (blink.plan.PromptLogprobs per prompt)."""
        scored = await run_in_threadpool(self.backend.prompt_logprobs, prompts, top, caller, ranks)
        metrics.scored(self.model_name, sum(map(len, prompts)), sum(s.cached_tokens for s in scored))
        return scored

    def _tokenize(self, prompt: str | list[int], max_tokens: int, loc: tuple = ("prompt",)) -> Rendered:
        engine = self.engine
        if isinstance(prompt, str):
            cap = self.cap
            window = engine.context_tokens
            if capped_tokens(cap.encode, prompt, window, cap.longest) is None:
                raise InvalidRequest(
                    f"the prompt is over this server's context window of {window} tokens (prompt and completion "
                    "together). Nothing was truncated: shorten the prompt.",
                    loc=["body", *loc],
                    kind="context_length_exceeded",
                )
            ids = cap.encode(prompt)
        else:
            ids = list(prompt)
        if max_tokens == 0 and len(ids) <= engine.context_tokens:
            return Rendered(ids, 0)
        try:
            budget = engine.budget(ids, max_tokens)
        except InvalidRequest as error:
            raise InvalidRequest(
                error.message.replace("conversation", "prompt"), loc=["body", *loc], kind=error.kind
            ) from None
        return Rendered(ids, budget)

    # generate ----------------------------------------------------------------------------------------------------
    def start(
        self, held: AsyncExitStack, rendered: Rendered, params: GenerationParams, caller: Any, streamed: bool
    ) -> GeneratorStream:
        """Generate `rendered` with `params` (its output budget and images are the rendering's) as `caller`; the
        stream is closed when the exchange (`held`) ends."""
        params = replace(params, max_tokens=rendered.max_tokens, images=tuple(rendered.images))
        ids = rendered.ids
        stream = GeneratorStream(
            lambda: self.measured(self.backend.generate(ids, params, caller)), self.keepalive_s if streamed else None
        )
        held.push_async_callback(stream.aclose)
        return stream

    def generate_sync(self, rendered: Rendered, caller: Any) -> Iterator[Any]:
        """The UI's blocking generator (it runs in Gradio's worker thread)."""
        return self.measured(
            self.backend.generate(rendered.ids, GenerationParams(max_tokens=rendered.max_tokens), caller)
        )

    def measured(self, items: Iterator[Any]) -> Iterator[Any]:
        """The backend's items as they are, recorded in this process's metrics (on the Space too: the GPU worker's
        items pass through here): the time to the first one, then the token counts of the end."""
        started, first = time.perf_counter(), True
        try:
            for item in items:
                if isinstance(item, ChatEnd):
                    metrics.chat_ended(self.model_name, item.finish_reason, item.prompt_tokens, item.completion_tokens)
                elif first:
                    metrics.TTFT.labels(self.model_name).observe(time.perf_counter() - started)
                    first = False
                yield item
        finally:
            if (close := getattr(items, "close", None)) is not None:
                close()  # closed with us, at once: on ZeroGPU that stops the worker and frees the GPU

    def thinking(self, ids: list[int]) -> tuple[bool, bool]:
        """(thinking on, the prompt opened the `<think>` block itself)."""
        on = bool(self.engine.enable_thinking)
        return on, on and opens_thinking(self.engine.tokenizer.decode(ids[-8:]))
