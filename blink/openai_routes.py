"""The OpenAI wire: `POST /v1/chat/completions` and `POST /v1/decisions` (`GET /v1/models` is blink.catalog's).

Every failure, validation included, is answered in OpenAI's shape `{"error": {"message","type","param",
"code"}}` (400 for a bad request, never FastAPI's bare 422), so the `openai` SDK's `e.message` names the
field and Open WebUI shows the reason. Bodies are read by blink.http (size cap, Content-Encoding).

Chat: the request is validated and rendered in the main process (blink.chat.ChatEngine), then the injected
generator function (`ctx.chat`: the engine's own `generate`, or the Space's `@spaces.GPU` wrapper of it) is
pulled one item at a time in a worker thread (`anyio.to_thread.run_sync(next, gen, sentinel)`); when the
client goes away the pump stops pulling and calls `gen.close()`, which is what stops a ZeroGPU worker.

Streaming (SSE): the `role` chunk goes out at once (before the GPU starts), `: keep-alive` comment lines
while no item has arrived for `KEEPALIVE_S` seconds, `delta.content` chunks, tool calls (parsed from the
text by blink.toolcalls), the final chunk with `finish_reason`, a usage chunk when
`stream_options.include_usage`, and `data: [DONE]`. A failure after streaming began is sent as
`data: {"error": {...}}` followed by `data: [DONE]`.

Decisions: OpenAI's Decisions wire (`client.decisions.create`) mapped onto the same decision service as
`/v1/systemone` (predicate -> noul, choice -> criteria, score -> levels), so both wires give the same
probabilities for the same question.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import anyio
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from .chat import ChatEnd
from .context import Context
from .errors import BlinkError, EngineFailure, InvalidRequest, Overloaded, PayloadTooLarge, Unauthorized
from .http import json_response, new_request_id, read_request
from .service import Timing

log = logging.getLogger("blink")

UNAUTHORIZED = "missing or invalid API key: send Authorization: Bearer <key>"
KEEPALIVE_S = float(os.environ.get("BLINK_SSE_KEEPALIVE_S") or 5.0)
MAX_STOP_SEQUENCES = 4
ROLES = {"system", "developer", "user", "assistant", "tool"}
IMAGE_PARTS = {"image_url", "input_image", "image"}
TEXT_ONLY = "this server's model reads text only: image parts are not accepted"


# errors ------------------------------------------------------------------------------------------------------
def param_of(loc: list) -> str | None:
    """["body", "messages", 2, "content"] -> "messages[2].content"."""
    parts = list(loc[1:] if loc and loc[0] == "body" else loc)
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or None


def error_response(error: BlinkError, request_id: str):
    status = 400 if isinstance(error, InvalidRequest) else error.status
    if status in (400, 413, 415) or isinstance(error, (InvalidRequest, PayloadTooLarge)):
        kind = "invalid_request_error"
    elif status == 429:
        kind = "rate_limit_error"
    else:
        kind = error.error_type
    body = {"error": {"message": error.message, "type": kind, "param": param_of(error.loc), "code": error.kind}}
    if isinstance(error, Unauthorized):
        body["error"]["code"] = "invalid_api_key"
    headers = {"x-request-id": request_id, "x-typesafe-request-id": request_id, **error.headers}
    if isinstance(error, Unauthorized):
        headers["WWW-Authenticate"] = "Bearer"
    return json_response(body, status, headers)


def as_blink_error(exc: BaseException) -> BlinkError:
    if isinstance(exc, BlinkError):
        return exc
    return EngineFailure(f"generation failed: {type(exc).__name__}: {exc}", kind="generation_failed")


def bad(message: str, *loc, kind: str = "invalid_value") -> InvalidRequest:
    return InvalidRequest(message, loc=["body", *loc], kind=kind)


# chat request validation ------------------------------------------------------------------------------------
@dataclass
class ChatRequest:
    messages: list[dict]
    tools: list[dict] | None = None
    stream: bool = False
    include_usage: bool = False
    max_tokens: int | None = None
    params: dict = field(default_factory=dict)


def data_url(part: dict, *loc) -> tuple[str, str]:
    """The (format, base64) of an `image_url` / `input_image` part's data URL; anything else is a 400 (this
    server fetches nothing)."""
    url = part.get("image_url", part.get("url"))
    url = url.get("url") if isinstance(url, dict) else url
    if not isinstance(url, str) or not url.startswith("data:image/") or ";base64," not in url:
        raise bad("an image part needs a data URL (data:image/png;base64,...): this server fetches nothing",
                  *loc, "image_url", kind="invalid_image_url")
    return url[len("data:image/"):url.index(";")], url.split(",", 1)[1]


def _text_of(content: Any, *loc) -> str | list:
    """Message content as text: a string, or the text parts of a list joined by newlines. With image parts,
    a list of `text` and `image` blocks instead (the chat engine decodes the images, or refuses them when
    the model reads text only)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad("`content` must be a string or a list of content parts", *loc)
    texts, blocks = [], []
    for i, part in enumerate(content):
        if isinstance(part, str):
            texts.append(part)
            blocks.append({"type": "text", "text": part})
            continue
        if not isinstance(part, dict):
            raise bad("a content part must be an object with a `type`", *loc, i)
        kind = part.get("type")
        if kind in ("text", "input_text", "output_text"):
            text = part.get("text")
            if not isinstance(text, str):
                raise bad("a text part needs a string `text`", *loc, i, "text")
            texts.append(text)
            blocks.append({"type": "text", "text": text})
        elif kind in IMAGE_PARTS:
            blocks.append({"type": "image", "data_base64": data_url(part, *loc, i)[1], "loc": [*loc, i]})
        elif kind == "refusal":
            continue
        else:
            raise bad(f"content part type {kind!r} is not supported", *loc, i, "type", kind="unsupported_content")
    if any(block["type"] == "image" for block in blocks):
        return blocks
    return "\n".join(texts)


def _message(raw: Any, i: int) -> dict:
    from .chat import arguments_for_template

    if not isinstance(raw, dict):
        raise bad("a message must be an object with `role` and `content`", "messages", i)
    role = raw.get("role")
    if role not in ROLES:
        raise bad(f"`role` must be one of system, developer, user, assistant, tool; got {role!r}",
                  "messages", i, "role")
    msg: dict = {"role": "system" if role == "developer" else role,
                 "content": _text_of(raw.get("content"), "messages", i, "content")}
    if isinstance(raw.get("name"), str):
        msg["name"] = raw["name"]
    if role == "assistant" and raw.get("tool_calls"):
        calls = raw["tool_calls"]
        if not isinstance(calls, list):
            raise bad("`tool_calls` must be a list", "messages", i, "tool_calls")
        out = []
        for j, call in enumerate(calls):
            fn = call.get("function") if isinstance(call, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                raise bad("a tool call needs `function.name`", "messages", i, "tool_calls", j, "function")
            out.append({"id": call.get("id"), "type": "function",
                        "function": {"name": fn["name"], "arguments": arguments_for_template(fn.get("arguments", {}))}})
        msg["tool_calls"] = out
    if role == "tool" and isinstance(raw.get("tool_call_id"), str):
        msg["tool_call_id"] = raw["tool_call_id"]
    return msg


def _number(body: dict, name: str, low: float, high: float):
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise bad(f"`{name}` must be a number", name)
    if not low <= value <= high:
        raise bad(f"`{name}` must be between {low:g} and {high:g}, got {value}", name)
    return float(value)


def _integer(body: dict, name: str, low: int | None = None):
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, float) and value.is_integer())):
        raise bad(f"`{name}` must be an integer", name)
    value = int(value)
    if low is not None and value < low:
        raise bad(f"`{name}` must be at least {low}, got {value}", name)
    return value


def parse_chat(body: Any) -> ChatRequest:
    if not isinstance(body, dict):
        raise bad("the body must be a JSON object with `model` and `messages`")
    if body.get("model") is not None and not isinstance(body.get("model"), str):
        raise bad("`model` must be a string", "model")
    messages = body.get("messages")
    if messages is None:
        raise bad("`messages` is required", "messages", kind="missing")
    if not isinstance(messages, list) or not messages:
        raise bad("`messages` must be a non-empty list of messages", "messages")
    msgs = [_message(m, i) for i, m in enumerate(messages)]

    n = _integer(body, "n", 1)
    if n is not None and n != 1:
        raise bad(f"`n` must be 1: this server returns one choice per request, got {n}", "n", kind="unsupported_value")
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise bad("`stream` must be true or false", "stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise bad("`stream_options` must be an object", "stream_options")
    include_usage = bool((options or {}).get("include_usage"))

    max_tokens = _integer(body, "max_completion_tokens", 1)
    if max_tokens is None:
        max_tokens = _integer(body, "max_tokens", 1)
    temperature = _number(body, "temperature", 0.0, 2.0)
    top_p = _number(body, "top_p", 0.0, 1.0)
    top_k = _integer(body, "top_k", 0)
    seed = _integer(body, "seed")

    stop = body.get("stop")
    if stop is None:
        stops: list[str] = []
    elif isinstance(stop, str):
        stops = [stop]
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        stops = list(stop)
    else:
        raise bad("`stop` must be a string or a list of strings", "stop")
    if len(stops) > MAX_STOP_SEQUENCES:
        raise bad(f"`stop` takes at most {MAX_STOP_SEQUENCES} sequences, got {len(stops)}", "stop")

    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise bad("`tools` must be a list of tools", "tools")
        for i, tool in enumerate(tools):
            fn = tool.get("function") if isinstance(tool, dict) else None
            if not isinstance(tool, dict) or tool.get("type", "function") != "function" or not isinstance(fn, dict):
                raise bad("a tool must be {\"type\": \"function\", \"function\": {\"name\", ...}}", "tools", i)
            if not isinstance(fn.get("name"), str) or not fn["name"]:
                raise bad("a tool's function needs a `name`", "tools", i, "function", "name")
    choice = body.get("tool_choice")
    if choice is not None and choice not in ("none", "auto", "required") and not (
            isinstance(choice, dict) and isinstance((choice.get("function") or {}).get("name"), str)):
        raise bad("`tool_choice` must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                  "\"function\": {\"name\": ...}}", "tool_choice")
    if choice == "none":
        tools = None

    params = {"temperature": temperature, "top_p": top_p, "top_k": top_k, "seed": seed, "stop": stops}
    return ChatRequest(msgs, tools or None, bool(stream), include_usage, max_tokens, params)


# pulling the GPU generator -----------------------------------------------------------------------------------
_END = object()
_TASKS: set = set()


class Pump:
    """Pulls the generator in a worker thread, one item at a time, into a queue. `stop()` makes it stop
    after the item in flight and close the generator (in the thread: a ZeroGPU wrapper's close talks to the
    worker). The task is never cancelled, so `close()` never meets a generator that is still executing."""

    def __init__(self, fn, ids: list[int], params: dict):
        self.queue: asyncio.Queue = asyncio.Queue()
        self.stopping = False
        self.task = asyncio.get_running_loop().create_task(self._run(fn, ids, params))
        _TASKS.add(self.task)
        self.task.add_done_callback(_TASKS.discard)

    async def _run(self, fn, ids, params) -> None:
        gen = None
        try:
            gen = await anyio.to_thread.run_sync(fn, ids, params)
            while not self.stopping:
                item = await anyio.to_thread.run_sync(next, gen, _END)
                if item is _END:
                    break
                self.queue.put_nowait(("item", item))
                if isinstance(item, ChatEnd):
                    break
        except Exception as exc:  # noqa: BLE001 - handed to the route, which answers in the wire's shape
            self.queue.put_nowait(("error", exc))
        finally:
            self.queue.put_nowait(("end", None))
            if gen is not None and hasattr(gen, "close"):
                try:
                    await anyio.to_thread.run_sync(gen.close)
                except Exception:  # noqa: BLE001
                    log.exception("closing the chat generator failed")

    def stop(self) -> None:
        self.stopping = True


async def pulled(pump: Pump, keepalive_s: float | None):
    """Items from the pump; `None` each time `keepalive_s` passes without one."""
    getter = None
    try:
        while True:
            if getter is None:
                getter = asyncio.ensure_future(pump.queue.get())
            done, _ = await asyncio.wait({getter}, timeout=keepalive_s)
            if not done:
                yield None
                continue
            kind, item = getter.result()
            getter = None
            if kind == "end":
                return
            if kind == "error":
                raise item
            yield item
    finally:
        if getter is not None and not getter.done():
            getter.cancel()
        pump.stop()


# chat route -------------------------------------------------------------------------------------------------
def sse(obj) -> str:
    return "data: " + json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n\n"


def _usage(final: ChatEnd) -> dict:
    p, c = final.prompt_tokens, final.completion_tokens
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


def _tool_names(tools: list[dict] | None) -> list[str] | None:
    return [t["function"]["name"] for t in tools] if tools else None


class ChatSlots:
    """At most `n` chat generations at once; past that a chat gets 529 + Retry-After (the SDKs retry it)
    instead of slowing every running chat down and queueing without bound."""

    def __init__(self, n: int):
        self.free = n
        self.lock = threading.Lock()

    def take(self) -> None:
        with self.lock:
            if self.free <= 0:
                raise Overloaded("blink is busy: every chat slot is generating. Retry after a short delay.")
            self.free -= 1

    def give(self) -> None:
        with self.lock:
            self.free += 1


async def releasing(stream, slots: ChatSlots):
    try:
        async for item in stream:
            yield item
    finally:
        slots.give()


def routes(ctx: Context) -> list[Route]:
    slots = ChatSlots(ctx.max_concurrent_chats)

    def check_auth(request: Request) -> None:
        if not ctx.auth.allows(request.headers.get("authorization")):
            raise Unauthorized(UNAUTHORIZED, kind="invalid_api_key")

    async def chat_completions(request: Request):
        request_id = new_request_id()
        try:
            check_auth(request)
            body, parts = await read_request(request, ctx.limits)
            if parts:
                raise bad("send chat requests as JSON (application/json), not multipart", kind="unsupported_media")
            req = parse_chat(body)
            engine = getattr(ctx, "chat_engine", None)
            if ctx.chat is None or engine is None:
                raise BlinkError("chat is not enabled on this server", status=501, kind="chat_unavailable")
            rendered = await run_in_threadpool(engine.prepare, req.messages, req.tools, req.max_tokens)
        except BlinkError as error:
            return error_response(error, request_id)
        except Exception as exc:  # noqa: BLE001 - our fault: say so, log it, keep serving
            log.exception("request %s failed", request_id)
            return error_response(EngineFailure(f"internal error: {type(exc).__name__}: {exc}"), request_id)

        params = {**req.params, "max_tokens": rendered.max_tokens}
        if rendered.images:
            params["images"] = rendered.images
        completion_id = "chatcmpl-" + uuid.uuid4().hex[:24]
        created = int(time.time())
        headers = {"x-request-id": request_id, "x-typesafe-request-id": request_id}
        try:
            slots.take()
        except Overloaded as error:
            return error_response(error, request_id)
        if req.stream:
            stream = releasing(stream_chat(ctx, req, rendered.ids, params, completion_id, created), slots)
            return StreamingResponse(stream, media_type="text/event-stream",
                                     headers={**headers, "Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        try:
            out = await complete_chat(ctx, request, req, rendered.ids, params, completion_id, created)
        except BlinkError as error:
            return error_response(error, request_id)
        except Exception as exc:  # noqa: BLE001
            log.exception("request %s failed", request_id)
            return error_response(as_blink_error(exc), request_id)
        finally:
            slots.give()
        if out is None:  # the client left
            return json_response({"error": {"message": "client disconnected", "type": "invalid_request_error",
                                            "param": None, "code": "client_disconnected"}}, 499, headers)
        return json_response(out, 200, headers)

    async def decisions(request: Request):
        request_id, timing = new_request_id(), Timing()
        try:
            check_auth(request)
            body, parts = await read_request(request, ctx.limits)
            if parts:
                raise bad("send decision requests as JSON (application/json), not multipart",
                          kind="unsupported_media")
            mapped = to_systemone(body)
            try:
                decided = await ctx.service.decide(mapped.body, timing)
            except InvalidRequest as error:
                raise mapped.relocate(error) from None
            answers = mapped.answers(decided.answers)
        except BlinkError as error:
            if isinstance(error, EngineFailure):
                log.error("request %s failed: %s", request_id, error.message)
            return error_response(error, request_id)
        except Exception as exc:  # noqa: BLE001
            log.exception("request %s failed", request_id)
            return error_response(EngineFailure(f"internal error: {type(exc).__name__}: {exc}"), request_id)
        n = decided.input_tokens
        out = {"object": "decision", "model": ctx.served_name, "answers": answers,
               "usage": {"input_tokens": n, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                         "output_tokens": 0, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": n},
               "calibration": decisions_calibration(decided.calibration)}
        return json_response(out, 200, {"x-request-id": request_id, "x-typesafe-request-id": request_id,
                                        "server-timing": timing.header()})

    return [Route("/v1/chat/completions", chat_completions, methods=["POST"]),
            Route("/v1/decisions", decisions, methods=["POST"])]


async def disconnected(request: Request) -> None:
    """Returns when the client goes away. (A blocking receive: `request.is_disconnected()` polls with a
    cancelled scope, which never sees the disconnect behind Starlette's BaseHTTPMiddleware.)"""
    while True:
        message = await request.receive()
        if message.get("type") == "http.disconnect":
            return


async def complete_chat(ctx: Context, request: Request, req: ChatRequest, ids: list[int], params: dict,
                        completion_id: str, created: int) -> dict | None:
    from .toolcalls import parse

    pump = Pump(ctx.chat, ids, params)
    text, final = [], None
    gone = asyncio.ensure_future(disconnected(request))
    try:
        async with contextlib.aclosing(pulled(pump, 0.5)) as items:
            async for item in items:
                if isinstance(item, ChatEnd):
                    final = item
                elif item is not None:
                    text.append(item)
                if gone.done():  # nobody is waiting for the answer any more: stop the GPU work
                    return None
    finally:
        gone.cancel()
    if final is None:
        raise EngineFailure("generation ended without a result", kind="generation_failed")
    content = "".join(text)
    finish = final.finish_reason
    message: dict = {"role": "assistant", "content": content}
    if req.tools:
        parsed = parse(content, _tool_names(req.tools))
        if parsed.calls:
            message = {"role": "assistant", "content": parsed.content, "tool_calls": parsed.calls}
            finish = "tool_calls"
    return {"id": completion_id, "object": "chat.completion", "created": created, "model": ctx.served_name,
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
            "usage": _usage(final)}


async def stream_chat(ctx: Context, req: ChatRequest, ids: list[int], params: dict, completion_id: str,
                      created: int):
    from .toolcalls import ToolStream

    base = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": ctx.served_name}
    if req.include_usage:
        base["usage"] = None

    def chunk(delta: dict, finish: str | None = None) -> str:
        return sse({**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]})

    yield chunk({"role": "assistant", "content": ""})  # at once, before the GPU is even asked
    splitter = ToolStream(_tool_names(req.tools)) if req.tools else None
    final = None
    pump = Pump(ctx.chat, ids, params)
    try:
        async with contextlib.aclosing(pulled(pump, KEEPALIVE_S)) as items:
            async for item in items:
                if item is None:
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
        if req.include_usage:
            yield sse({**base, "choices": [], "usage": _usage(final)})
    except Exception as exc:  # noqa: BLE001 - headers are sent: report in the stream, then end it cleanly
        error = as_blink_error(exc)
        if isinstance(error, EngineFailure):
            log.error("chat %s failed: %s", completion_id, error.message)
        yield sse({"error": {"message": error.message, "type": error.error_type, "param": None, "code": error.kind}})
    finally:
        pump.stop()
    yield "data: [DONE]\n\n"


# decisions mapping ------------------------------------------------------------------------------------------
@dataclass
class Mapped:
    """An OpenAI Decisions request as a System One body, and the way back for its answers and errors."""

    body: dict
    questions: list[dict]  # per question: kind, name, and the typed values for the answer

    def relocate(self, error: InvalidRequest) -> InvalidRequest:
        """System One locations (["body","questions","questions[3]",...]) and names -> OpenAI params."""
        loc = list(error.loc)
        message = error.message
        if loc[:2] == ["body", "questions"] and len(loc) > 2 and str(loc[2]).startswith("questions["):
            qid = str(loc[2])
            message = message.replace(f"question {qid!r}", qid)
            loc = ["body", qid, *loc[3:]]
        elif loc[:2] == ["body", "state"]:
            loc = ["body", "input"]
            message = message.replace("`state`", "`input`").replace("the state", "the input")
        else:
            message = message.replace("the state", "the input")
        return InvalidRequest(message, loc=loc, kind=error.kind)

    def answers(self, answers: dict) -> list[dict]:
        out = []
        for i, q in enumerate(self.questions):
            raw = answers[f"questions[{i}]"]
            if q["kind"] == "predicate":
                out.append({"type": "predicate", "name": q["name"], "probability": raw["noul"]})
            elif q["kind"] == "choice":
                probs = raw["probabilities"]
                by_key = dict(zip(q["keys"], q["values"]))
                out.append({"type": "choice", "name": q["name"], "choice": by_key[raw["choice"]],
                            "confidence": raw["confidence"],
                            "probabilities": [{"value": v, "probability": probs[k]}
                                              for k, v in zip(q["keys"], q["values"])]})
            else:
                probs = raw["probabilities"]
                out.append({"type": "score", "name": q["name"], "score": raw["score"], "confidence": raw["confidence"],
                            "probabilities": [{"value": j, "label": label, "probability": probs[str(j)]}
                                              for j, label in enumerate(q["labels"])]})
        return out


def _image_placeholder(part: dict, images: list, loc: tuple) -> str:
    """An `input_image` / `image_url` part as a System One asset: the data URL's bytes under a placeholder
    that stands where the image was (the engine refuses it if the model reads text only)."""
    fmt, data = data_url(part, *loc)
    placeholder = f"<image:input-{len(images)}>"
    images.append((placeholder, {"type": "image", "format": fmt, "data_base64": data}))
    return placeholder


def _parts_text(content: Any, *loc, allow_json: bool = True, images: list | None = None) -> Any:
    """Decision input content: a string, or text/JSON/image parts. A lone JSON part stays JSON; images
    become placeholders (collected in `images`)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad("content must be a string or a list of parts", *loc)
    if len(content) == 1 and isinstance(content[0], dict) and content[0].get("type") == "input_json" and allow_json:
        data = content[0].get("data")
        if not isinstance(data, (dict, list)):
            raise bad("an input_json part needs `data` (an object or a list of objects)", *loc, 0, "data")
        return data
    texts = []
    for i, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text"):
            if not isinstance(part.get("text"), str):
                raise bad("a text part needs a string `text`", *loc, i, "text")
            texts.append(part["text"])
        elif kind == "input_json":
            texts.append(json.dumps(part.get("data"), ensure_ascii=False))
        elif kind == "refusal":
            texts.append(str(part.get("refusal", "")))
        elif kind in IMAGE_PARTS and images is not None:
            texts.append(_image_placeholder(part, images, (*loc, i)))
        else:
            raise bad(f"unsupported content part type {kind!r}", *loc, i, "type")
    return "\n".join(texts)


def _input_state(value: Any, images: list) -> Any:
    if isinstance(value, str):
        return value
    if not isinstance(value, list) or not value:
        raise bad("`input` must be a string or a non-empty list of messages", "input",
                  kind="missing" if value is None else "invalid_value")
    items = []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise bad("an input item must be an object", "input", i)
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "developer", "system", "assistant"):
                raise bad(f"`role` must be user, developer, system or assistant; got {role!r}", "input", i, "role")
            items.append((role, _parts_text(item.get("content"), "input", i, "content", allow_json=len(value) == 1,
                                            images=images)))
        elif kind in ("function_call", "custom_tool_call"):
            args = item.get("arguments") if kind == "function_call" else item.get("input")
            items.append(("tool call", f"{item.get('name')}({args if isinstance(args, str) else json.dumps(args)})"))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            items.append(("tool output", _parts_text(item.get("output"), "input", i, "output", allow_json=False)))
        else:
            raise bad(f"unsupported input item type {kind!r}", "input", i, "type")
    if len(items) == 1 and items[0][0] == "user":
        return items[0][1]  # one user message: its text (or JSON) is the state, as /v1/systemone would take it
    return "\n\n".join(f"{role}: {text if isinstance(text, str) else json.dumps(text)}" for role, text in items)


def to_systemone(body: Any) -> Mapped:
    if not isinstance(body, dict):
        raise bad("the body must be a JSON object with `model`, `input` and `questions`")
    if body.get("model") is not None and not isinstance(body["model"], str):
        raise bad("`model` must be a string", "model")
    if "input" not in body:
        raise bad("`input` is required", "input", kind="missing")
    images: list = []
    state = _input_state(body["input"], images)
    questions = body.get("questions")
    if questions is None:
        raise bad("`questions` is required", "questions", kind="missing")
    if not isinstance(questions, list) or not questions:
        raise bad("`questions` must be a non-empty list of questions", "questions")
    out_questions: dict = {}
    plan: list[dict] = []
    for i, q in enumerate(questions):
        qid = f"questions[{i}]"
        if not isinstance(q, dict):
            raise bad("a question must be an object with a `type`", qid)
        kind = q.get("type")
        name = q.get("name")
        if name is not None and not isinstance(name, str):
            raise bad("`name` must be a string", qid, "name")
        if "instructions" not in q:
            raise bad("`instructions` is required", qid, "instructions", kind="missing")
        instructions = _parts_text(q["instructions"], qid, "instructions", allow_json=False)
        if kind == "predicate":
            out_questions[qid] = {"type": "noul", "instructions": instructions}
            plan.append({"kind": "predicate", "name": name})
        elif kind == "choice":
            choices = q.get("choices")
            if not isinstance(choices, list) or len(choices) < 2:
                raise bad("a choice question needs `choices`: a list of at least 2 {value, description}", qid,
                          "choices")
            criteria, keys, values = {}, [], []
            for j, c in enumerate(choices):
                value = c.get("value") if isinstance(c, dict) else None
                if not isinstance(value, (str, bool)):
                    raise bad("a choice needs a `value` (a string or a boolean)", qid, "choices", j, "value")
                key = value if isinstance(value, str) else ("true" if value else "false")
                if key in criteria:
                    raise bad(f"choice values must be unique; {key!r} appears twice", qid, "choices", j, "value")
                description = c.get("description")
                if description is not None and not isinstance(description, str):
                    raise bad("`description` must be a string", qid, "choices", j, "description")
                criteria[key] = description
                keys.append(key)
                values.append(value)
            out_questions[qid] = {"type": "choice", "instructions": instructions, "criteria": criteria}
            plan.append({"kind": "choice", "name": name, "keys": keys, "values": values})
        elif kind == "score":
            levels = q.get("levels")
            if not isinstance(levels, list) or not levels:
                raise bad("a score question needs `levels`: a list of {label, description}, lowest first", qid,
                          "levels")
            criteria, labels = [], []
            for j, level in enumerate(levels):
                label = level.get("label") if isinstance(level, dict) else None
                if not isinstance(label, str):
                    raise bad("a level needs a string `label`", qid, "levels", j, "label")
                description = level.get("description")
                if description is not None and not isinstance(description, str):
                    raise bad("`description` must be a string", qid, "levels", j, "description")
                criteria.append(f"{label}: {description}" if description else label)
                labels.append(label)
            out_questions[qid] = {"type": "score", "instructions": instructions, "criteria": criteria}
            plan.append({"kind": "score", "name": name, "labels": labels})
        else:
            raise bad(f"`type` must be predicate, choice or score; got {kind!r}", qid, "type")
    mapped = {"state": state, "questions": out_questions}
    if images:
        mapped["assets"] = dict(images)
    if isinstance(body.get("model"), str):
        mapped["model"] = body["model"]
    for extension in ("x_calibration", "x_order"):  # read (and checked) by the decision service as on /v1/systemone
        if extension in body:
            mapped[extension] = body[extension]
    return Mapped(mapped, plan)


def decisions_calibration(fact: dict) -> dict:
    """System One's `x_calibration` in this wire's words (noul questions are `predicate` here)."""
    names = {"noul": "predicate", "choice": "choice", "score": "score"}
    return {"applied": fact["applied"], "temperatures": {names[k]: t for k, t in fact["temperatures"].items()}}
