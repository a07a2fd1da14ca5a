"""`POST /tokenize`, `POST /detokenize` and `GET /tokenizer_info`: the served model's tokenizer in vLLM's shapes.

What clients that count or build token ids on the server ask for: lm-eval's remote tokenizer (`local-completions`
probes `/tokenizer_info` for `eos_token`, then tokenizes every context and continuation through `/tokenize` with
`add_special_tokens: false`, and decodes through `/detokenize`).

- `/tokenize`: `{model?, prompt, add_special_tokens?, return_token_strs?}` (the text as it is), or
  `{model?, messages, tools?, ...}` (the conversation through the chat template, as a chat turn renders it)
  -> `{count, max_model_len, tokens, token_strs}`;
- `/detokenize`: `{model?, tokens}` -> `{prompt}`;
- `/tokenizer_info`: the tokenizer's class, special tokens, chat template and context window.

Behind the API key like /v1/*, errors in OpenAI's shape. No model time: nothing is admitted, but every text is
counted within the context window first (a longer one is refused, never tokenized whole).
"""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.routing import Route

from blink.api.openai.protocol import WIRE, bad, parse_chat
from blink.context import Context
from blink.tokens import capped_tokens
from blink.web.endpoint import Body, Call, Endpoint


def model_checked(ctx: Context, body: Any, needs: str) -> dict:
    if not isinstance(body, dict):
        raise bad(f"the body must be a JSON object with `{needs}`")
    model = body.get("model")
    if model is not None and model not in ctx.model_names():
        raise bad(f"`model` must be one this server serves: {', '.join(ctx.model_names())}", "model")
    return body


def flag(body: dict, name: str, default: bool) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise bad(f"`{name}` must be a boolean", name)
    return value


def check_tokenize(ctx: Context, body: Any) -> dict:
    body = model_checked(ctx, body, "prompt` or `messages")
    if ("prompt" in body) == ("messages" in body):
        raise bad("send exactly one of `prompt` (a string) and `messages` (a conversation)")
    if "messages" in body:
        req = parse_chat(body)
        ctx.chats.check(req.messages)
        return {"messages": req.messages, "tools": req.tools, "strs": flag(body, "return_token_strs", False)}
    if not isinstance(body["prompt"], str):
        raise bad("`prompt` must be a string", "prompt")
    return {
        "prompt": body["prompt"],
        "special": flag(body, "add_special_tokens", True),
        "strs": flag(body, "return_token_strs", False),
    }


def check_detokenize(ctx: Context, body: Any) -> list[int]:
    tokens = model_checked(ctx, body, "tokens").get("tokens")
    if not isinstance(tokens, list) or not all(type(t) is int for t in tokens):
        raise bad(
            "`tokens` must be a list of token ids", "tokens", kind="missing" if tokens is None else "invalid_value"
        )
    window = ctx.chats.engine.context_tokens
    if len(tokens) > window:
        raise bad(f"`tokens` holds {len(tokens)} ids, past this server's context window of {window}", "tokens")
    ctx.chats.check_ids(tokens, ("tokens",))
    return tokens


def routes(ctx: Context) -> list[Route]:
    engine = ctx.chats.engine
    tokenizer = engine.tokenizer
    window = engine.context_tokens

    def ids_of(req: dict) -> list[int]:
        if "messages" in req:
            engine.check_length(req["messages"])
            return engine.render(req["messages"], req["tools"]).ids
        prompt = req["prompt"]
        if capped_tokens(ctx.chats.cap.encode, prompt, window, ctx.chats.cap.longest) is None:
            raise bad(f"`prompt` is over this server's context window of {window} tokens", "prompt")
        return tokenizer(prompt, add_special_tokens=req["special"])["input_ids"]

    async def tokenize(call: Call):
        ids = await run_in_threadpool(ids_of, call.checked)
        strs = tokenizer.convert_ids_to_tokens(ids) if call.checked["strs"] else None
        return {"count": len(ids), "max_model_len": window, "tokens": ids, "token_strs": strs}

    async def detokenize(call: Call):
        return {"prompt": await run_in_threadpool(tokenizer.decode, call.checked)}

    async def tokenizer_info(call: Call):
        return {
            "tokenizer_class": type(tokenizer).__name__,
            "eos_token": tokenizer.eos_token,
            "bos_token": tokenizer.bos_token,
            "pad_token": tokenizer.pad_token,
            "unk_token": tokenizer.unk_token,
            "chat_template": getattr(tokenizer, "chat_template", None),
            "model_max_length": window,
        }

    def post(handler, check, what: str) -> Endpoint:
        return Endpoint(ctx, WIRE, handler, body=Body(what), check=lambda call: check(ctx, call.body))

    return [
        Route("/tokenize", post(tokenize, check_tokenize, "tokenize requests"), methods=["POST"]),
        Route("/detokenize", post(detokenize, check_detokenize, "detokenize requests"), methods=["POST"]),
        Route("/tokenizer_info", Endpoint(ctx, WIRE, tokenizer_info), methods=["GET"]),
    ]
