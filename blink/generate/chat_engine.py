"""Chat generation: the main process renders and tokenizes, one plain generator function generates.

`ChatEngine.render` (main process) turns OpenAI-style messages into token ids with the model's own chat
template: tools are rendered by the template (`tools=`), thinking is off (`enable_thinking=False`), and an
optional server system prompt goes first when the conversation has none. A conversation longer than the
context limit is refused (400 naming `messages`), never cut.

`ChatEngine.generate(ids, params)` is the GPU step. It takes plain data (a list of token ids and a
blink.plan.GenerationParams) and yields plain data: `str` text deltas (`Delta`, text and token logprobs, when
logprobs are asked), then exactly one final `ChatEnd` (finish reason, token counts, and the compute seconds
measured where it ran). Nothing else crosses:
no tensors, no exceptions that need our classes on the other side. So on ZeroGPU it is wrapped in
`@spaces.GPU` and each item is pickled to the main process; a consumer that closes the generator stops the
decode loop at its next yield (the loop is written by hand, one token per step, for exactly that reason).

Stop strings are applied inside the loop: text that could still become a stop string is held back, and a
stop string that completes ends generation without being sent. A constraint (`blink.generate.structured`) masks each
step's logits before sampling; generation ends when its grammar is complete.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from blink.errors import InvalidRequest, param_of
from blink.executor.compute_thread import iterate_on_cpu_thread
from blink.generate.logprobs import TokenLogprobs
from blink.generate.structured import Grammars
from blink.generate.text import IncrementalDecoder, StopStrings
from blink.limits import Limits
from blink.plan import GenerationParams
from blink.tokens import TokenCap

DEFAULT_MAX_OUTPUT_TOKENS = 4096


@dataclass(frozen=True)
class ChatEnd:
    """The last item of a generation: why it stopped, its token counts, and the seconds the GPU step took."""

    finish_reason: str  # "stop" | "length"
    prompt_tokens: int
    completion_tokens: int
    compute_s: float = 0.0


@dataclass(frozen=True)
class Delta:
    """A text delta and the logprobs of the tokens whose text it completes (yielded instead of `str` when
    `params.logprobs`). Each entry is OpenAI's `{token, logprob, bytes, top_logprobs: [{token, logprob,
    bytes}]}`; `text` is empty only in a last Delta that carries tokens cut by a stop string."""

    text: str
    logprobs: list[dict]


@dataclass
class Rendered:
    ids: list[int]
    max_tokens: int  # the output budget after clamping to the cap and the room left in the context
    images: list = field(default_factory=list)  # blink.plan.Image per image in `ids` (vision models)


@dataclass(frozen=True)
class Sampling:
    """A generation's sampling values, the engine's defaults filled in where its params left them unset."""

    max_tokens: int
    temperature: float  # 0: greedy
    top_p: float
    top_k: int  # 0: off
    seed: int | None  # None: the request fixed none

    @classmethod
    def from_params(cls, params: GenerationParams, defaults: dict, max_output_tokens: int) -> Sampling:
        def value(name: str):
            given = getattr(params, name)
            return defaults[name] if given is None else given

        return cls(
            max_tokens=int(params.max_tokens or max_output_tokens),
            temperature=float(value("temperature")),
            top_p=float(value("top_p")),
            top_k=int(value("top_k")),
            seed=None if params.seed is None else int(params.seed),
        )


class _Decoding:
    """One generation's state between its steps: the sampling values, the seeded sampler, the KV cache and the
    next step's input, the grammar, the logprobs, and the text filters (incremental decoder, stop strings)."""

    def __init__(self, engine: ChatEngine, ids: list[int], params: GenerationParams):
        import torch
        from transformers import DynamicCache

        self.sampling = Sampling.from_params(params, engine.defaults, engine.max_output_tokens)
        seed = self.sampling.seed if self.sampling.seed is not None else random.getrandbits(63)
        self.matcher = engine.grammars.matcher(params.constraint) if params.constraint else None
        self.logprobs = (
            TokenLogprobs(engine.tokenizer, engine.hidden_ids, int(params.top_logprobs or 0))
            if params.logprobs
            else None
        )
        model = engine.model
        self.device = next(model.parameters()).device
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(seed % (1 << 63))
        self.decoder = IncrementalDecoder(engine.tokenizer, engine.hidden_ids)
        self.stopper = StopStrings([s for s in params.stop if s])
        self.eos = set(engine.eos_ids)
        self.cache = DynamicCache(config=model.config)
        self.step_input = torch.tensor([ids], dtype=torch.long, device=self.device)
        self.distribution = None  # the last step's, kept only for logprobs
        with torch.inference_mode():
            self.extra, self.rope_delta = engine._first_step(ids, list(params.images), self.device)

    @property
    def grammar_complete(self) -> bool:
        return self.matcher is not None and self.matcher.is_stopped()

    def push(self, token: int) -> tuple[str, bool]:
        """A generated token in: the text it lets out (held back while it could still become a stop string) and
        whether a stop string completed."""
        if self.logprobs is not None:
            self.logprobs.push(token, self.distribution)
        return self.stopper.push(self.decoder.push(token))

    def delta_of(self, text: str):
        """What the generator yields for `text`: the text, or a Delta with the logprobs of the tokens it completes."""
        return Delta(text, self.logprobs.sent_text(text)) if self.logprobs is not None else text


class ChatEngine:
    """Chat on one loaded model. `render` runs in the main process; `generate` is the GPU generator."""

    def __init__(
        self,
        loaded,
        limits: Limits | None = None,
        *,
        system_prompt: str | None = None,
        max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS,
        enable_thinking: bool = False,
        image_limits=None,
    ):
        from blink.images.intake import ImageLimits

        self.model = loaded.model
        self.tokenizer = loaded.tokenizer
        self.processor = getattr(loaded, "processor", None)
        self.image_limits = image_limits or ImageLimits()
        # a vision-language model: positions are passed explicitly (Qwen's 3-D rotary positions for images)
        self.vision = getattr(getattr(self.model, "model", None), "language_model", None) is not None
        self.limits = limits or Limits()
        self.system_prompt = system_prompt or None
        self.max_output_tokens = int(max_output_tokens)
        self.enable_thinking = bool(enable_thinking)
        gen = getattr(self.model, "generation_config", None)
        eos = [self.tokenizer.eos_token_id, getattr(gen, "eos_token_id", None)]
        self.eos_ids = sorted(
            {int(i) for e in eos for i in (e if isinstance(e, (list, tuple)) else [e]) if i is not None}
        )
        self.hidden_ids = hidden_token_ids(self.tokenizer)
        # constrained decoding: the model's tool-call markup (Qwen3.5 writes XML-style calls, Qwen3 / Hermes JSON)
        template = str(getattr(self.tokenizer, "chat_template", None) or "")
        self.grammars = Grammars(
            self.tokenizer,
            self.model.config.get_text_config().vocab_size,
            self.eos_ids,
            tool_format="xml" if "<function=" in template else "json",
            reasoning=self.enable_thinking,
        )
        self.token_cap = None  # the length pre-check's vocabulary bound, found on first use
        # sampling defaults when the request sends none: the model's generation_config, else OpenAI's (1, 1)
        sample = bool(getattr(gen, "do_sample", False))
        self.defaults = {
            "temperature": float(getattr(gen, "temperature", None) or 1.0) if sample else 1.0,
            "top_p": float(getattr(gen, "top_p", None) or 1.0) if sample else 1.0,
            "top_k": int(getattr(gen, "top_k", None) or 0) if sample else 0,
        }

    # main process ----------------------------------------------------------------------------------------
    @property
    def context_tokens(self) -> int:
        return self.limits.max_context_tokens

    def _decode_images(self, messages: list[dict]) -> list[dict]:
        """Image blocks (base64 from the wire) decoded and checked against the image limits."""
        from blink.images.intake import check_count, check_size, decode, decode_base64

        blocks = [
            b for m in messages if isinstance(m.get("content"), list) for b in m["content"] if b.get("type") == "image"
        ]
        if not blocks:
            return messages
        if self.processor is None:
            raise InvalidRequest(
                "this server's model reads text only: image parts are not accepted",
                loc=["body", *blocks[0]["loc"]],
                kind="images_unsupported",
            )
        check_count(len(blocks), self.image_limits, ["body", "messages"])
        out = []
        for m in messages:
            if not isinstance(m.get("content"), list):
                out.append(m)
                continue
            content = []
            for b in m["content"]:
                if b["type"] != "image":
                    content.append(b)
                    continue
                name, loc = param_of(b["loc"]), ["body", *b["loc"]]
                data = decode_base64(name, b["data_base64"], loc)
                check_size(name, data, self.image_limits, loc)
                content.append({"type": "image", "image": decode(name, data, self.image_limits)})
            out.append({**m, "content": content})
        return out

    def render(self, messages: list[dict], tools: list[dict] | None = None) -> Rendered:
        """Token ids (and images) of the conversation, ready for the assistant's turn."""
        if self.system_prompt and not (messages and messages[0].get("role") == "system"):
            messages = [{"role": "system", "content": self.system_prompt}, *messages]
        messages = self._decode_images(messages)
        kwargs: dict[str, Any] = {"add_generation_prompt": True, "enable_thinking": self.enable_thinking}
        if tools:
            kwargs["tools"] = tools
        with_images = any(
            isinstance(m.get("content"), list) and any(b.get("type") == "image" for b in m["content"]) for m in messages
        )
        try:
            if with_images:
                out = self.processor.apply_chat_template(
                    messages, tokenize=True, return_dict=True, return_tensors="pt", **kwargs
                )
            else:
                out = self.tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True, **kwargs)
        except InvalidRequest:
            raise
        except Exception as exc:  # noqa: BLE001 - the template refused this conversation (e.g. role order)
            raise InvalidRequest(
                f"the model's chat template cannot render these messages: {exc}",
                loc=["body", "messages"],
                kind="invalid_messages",
            ) from None
        ids = out["input_ids"]
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        if ids and isinstance(ids[0], list):
            ids = ids[0]
        images = []
        if with_images:
            from blink.images.processed import split_images

            images = split_images(dict(out), {})
        return Rendered([int(i) for i in ids], 0, images)

    def check_length(self, messages: list[dict]) -> None:
        """Messages whose text alone passes the context window are refused before the conversation is rendered
        and tokenized whole: a refusal costs time and memory bounded by the window, not by the message."""
        cap = self.token_cap or TokenCap(self.tokenizer)
        self.token_cap = cap
        total = 0
        for i, m in enumerate(messages):
            content = m.get("content")
            parts = (
                [content]
                if isinstance(content, str)
                else [b.get("text") for b in content or [] if isinstance(b, dict) and isinstance(b.get("text"), str)]
            )
            for text in parts:
                if not isinstance(text, str):
                    continue
                total += len(text)
                if not cap.fits(text, self.context_tokens) or total > self.context_tokens * cap.longest:
                    raise InvalidRequest(
                        f"message {i} alone (or with those before it) is over this server's context window of "
                        f"{self.context_tokens} tokens. Nothing was truncated: shorten or drop earlier messages.",
                        loc=["body", "messages"],  # the conversation is what is too long, as the full check says
                        kind="context_length_exceeded",
                    )

    def budget(self, ids: list[int], max_tokens: int | None) -> int:
        """The output budget: the request's `max_tokens` (default: the cap), clamped to the server's cap and
        to the room the context has left. A prompt that leaves no room is refused with 400."""
        room = self.context_tokens - len(ids)
        if room < 1:
            raise InvalidRequest(
                f"the conversation is {len(ids)} tokens; this server's context window is {self.context_tokens} tokens "
                "(prompt and completion together). Nothing was truncated: shorten or drop earlier messages.",
                loc=["body", "messages"],
                kind="context_length_exceeded",
            )
        wanted = self.max_output_tokens if max_tokens is None else max_tokens
        return max(1, min(wanted, self.max_output_tokens, room))

    def prepare(self, messages: list[dict], tools: list[dict] | None, max_tokens: int | None) -> Rendered:
        self.check_length(messages)
        rendered = self.render(messages, tools)
        rendered.max_tokens = self.budget(rendered.ids, max_tokens)
        return rendered

    # the GPU step ----------------------------------------------------------------------------------------
    def generate(self, ids: list[int], params: GenerationParams) -> Iterator[Any]:
        """Yield text deltas (`str`, or `Delta` when logprobs are asked), then one `ChatEnd`; on the CPU each step
        runs on the compute thread (blink.executor.compute_thread), whichever thread pulls.

        `params`: a blink.plan.GenerationParams (its sampling values left None take the engine's defaults)."""
        return iterate_on_cpu_thread(next(self.model.parameters()).device, self._generate(ids, params))

    def _generate(self, ids: list[int], params: GenerationParams) -> Iterator[Any]:
        import time

        started = time.perf_counter()
        run = _Decoding(self, ids, params)
        produced, finish = 0, "length"
        while produced < run.sampling.max_tokens:
            token = self._step(run, len(ids) + produced)
            if token in run.eos:
                finish = "stop"
                if run.logprobs is not None and params.eos_entry:
                    run.logprobs.push(token, run.distribution, shown=False)
                break
            produced += 1
            text, hit = run.push(token)
            if text:
                yield run.delta_of(text)
            if hit or run.grammar_complete:  # the grammar is complete: only EOS is left
                finish = "stop"
                break
        yield from self._flush(run, stopped=finish == "stop" and run.stopper.hit)
        yield ChatEnd(finish, len(ids), produced, time.perf_counter() - started)

    def _step(self, run: _Decoding, position: int) -> int:
        """One forward step (the prompt's, then one per token) and the token sampled from it, which the grammar
        (if any) consumes. Inference mode is thread-local, and a consumer may resume the generator on another
        thread (Gradio and anyio do): so it is entered per step, never held across a `yield`."""
        import torch

        with torch.inference_mode():
            if self.vision and not run.extra:  # explicit positions: never the model's stored rope deltas
                n, shifted = position - 1, position - 1 + run.rope_delta
                run.extra = {
                    "position_ids": torch.tensor([[[n]], [[shifted]], [[shifted]], [[shifted]]], device=run.device)
                }
            out = self.model(input_ids=run.step_input, cache=run.cache, use_cache=True, logits_to_keep=1, **run.extra)
            run.extra = {}
            logits = out.logits[0, -1].float()
            if run.matcher is not None:  # EOS stays masked until the grammar accepts
                self.grammars.apply_mask(logits, run.matcher)
            s = run.sampling
            token, distribution = _sample(
                logits, s.temperature, s.top_p, s.top_k, run.generator, keep_distribution=run.logprobs is not None
            )
        if run.matcher is not None and not run.matcher.consume_token(token):
            raise RuntimeError(f"the grammar refused token {token} it allowed: {run.matcher.get_error()}")
        run.distribution = distribution
        run.step_input = torch.tensor([[token]], dtype=torch.long, device=run.device)
        return token

    @staticmethod
    def _flush(run: _Decoding, stopped: bool) -> Iterator[Any]:
        """The text the decoder and the stop-string filter still hold (none once a stop string ended it), and
        the logprobs of tokens a stop string cut and of tokens with no text left (an end-of-sequence entry),
        sent with empty text."""
        if not stopped:
            tail, _ = run.stopper.push(run.decoder.flush(), final=True)
            if tail:
                yield run.delta_of(tail)
        cut = run.logprobs.sent_text("") + run.logprobs.partly_sent() if run.logprobs is not None else []
        if cut:
            yield Delta("", cut)

    def _first_step(self, ids: list[int], images: list, device) -> tuple[dict, int]:
        """The prompt step's extra inputs on a vision-language model (pixels, grids, Qwen's 3-D positions)
        and the rotary offset the decode steps continue from. Text models need none."""
        import torch

        from blink.executor.vision import image_inputs, image_positions

        if not self.vision:
            return {}, 0
        n = len(ids)
        if not images:
            rope, delta = torch.arange(n).expand(3, n), 0
            extra = {}
        else:
            token = self.model.config.image_token_id
            rope, delta = image_positions(self.model.model, ids, images, token)
            extra = image_inputs(images, torch.tensor([ids]), token, device)
        positions = torch.cat([torch.arange(n).view(1, 1, n), rope.reshape(3, 1, n)]).to(device)
        return {**extra, "position_ids": positions}, delta


def _sample(logits, temperature: float, top_p: float, top_k: int, generator, keep_distribution: bool = False):
    """The next token, and (with `keep_distribution`) the log-probabilities it was drawn from over the whole
    vocabulary: the logits divided by the temperature, top-k and top-p applied (what they remove is -inf, the
    rest renormalized). Greedy decoding (temperature 0) draws the argmax; its distribution is the logits' own
    softmax. Whatever was masked before (a grammar) is -inf in both."""
    import torch

    scaled = logits / temperature if temperature > 0 else logits
    if temperature <= 0 or bool((torch.isinf(scaled) & torch.isfinite(logits)).any()):
        # greedy, or a temperature so small that the scaled logits overflow: its limit, the argmax
        token = int(torch.argmax(logits))
        return token, (torch.log_softmax(logits, dim=-1) if keep_distribution else None)
    logits = scaled
    if top_k and 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_probs, order = torch.sort(torch.softmax(logits, dim=-1), descending=True)
        cumulative = torch.cumsum(sorted_probs, dim=-1)
        drop = cumulative - sorted_probs >= top_p  # keep the smallest set reaching top_p (at least one)
        drop[0] = False
        logits = logits.index_fill(0, order[drop], float("-inf"))
    distribution = torch.log_softmax(logits, dim=-1)
    token = int(torch.multinomial(distribution.exp(), 1, generator=generator))
    return token, (distribution if keep_distribution else None)


def hidden_token_ids(tokenizer) -> frozenset[int]:
    """Special tokens left out of the text: control tokens (`<|im_end|>`, `<|endoftext|>`, ...). Markup tokens
    a model writes on purpose (`<tool_call>`, `<think>`) stay: tool calls are parsed from them."""
    hidden = set()
    for token, token_id in zip(tokenizer.all_special_tokens, tokenizer.all_special_ids):
        if token.startswith("<|") or token_id in (
            tokenizer.eos_token_id,
            tokenizer.pad_token_id,
            tokenizer.bos_token_id,
        ):
            hidden.add(int(token_id))
    return frozenset(hidden)
