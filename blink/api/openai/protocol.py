"""The OpenAI wire's protocol: request parsing and validation, content parts, and the error shape.

Every failure, validation included, is answered as `{"error": {"message","type","param","code"}}` (400 for a
bad request, never FastAPI's bare 422), so the `openai` SDK's `e.message` names the field and Open WebUI shows
the reason. `render` is the one rendering of an error: the JSON body, and the `data:` event of a stream that
fails after its headers were sent.

Chat requests are checked field by field (unknown fields ignored, as the live API does) into a `ChatRequest`;
content becomes text, or text and image blocks that blink.generate.chat_engine decodes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from blink.errors import BlinkError, InvalidRequest, NoRoute, PayloadTooLarge, Unauthorized, param_of
from blink.plan import GenerationParams
from blink.web.endpoint import Wire

MAX_STOP_SEQUENCES = 4
# tuples, not sets: a client's value may be unhashable (a dict), and `in` must refuse it, not raise
ROLES = ("system", "developer", "user", "assistant", "tool")
IMAGE_PARTS = ("image_url", "input_image", "image")


# errors ------------------------------------------------------------------------------------------------------
def render(error: BlinkError) -> tuple[int, dict]:
    """The status and body OpenAI's clients read (the live API's `type` names)."""
    status = 400 if isinstance(error, InvalidRequest) else error.status
    if status in (400, 413, 415) or isinstance(error, (InvalidRequest, PayloadTooLarge, NoRoute)):
        kind = "invalid_request_error"
    elif status == 429:
        kind = "rate_limit_error"
    else:
        kind = error.error_type
    code = "invalid_api_key" if isinstance(error, Unauthorized) else error.kind
    return status, {"error": {"message": error.message, "type": kind, "param": param_of(error.loc), "code": code}}


WIRE = Wire(render, id_headers=("x-request-id", "x-typesafe-request-id"))


def bad(message: str, *loc, kind: str = "invalid_value") -> InvalidRequest:
    """A 400 naming the field at `loc` (its path in the body)."""
    return InvalidRequest(message, loc=["body", *loc], kind=kind)


def require_model(body: dict, served: list[str]) -> None:
    """`model` is required on every OpenAI route (both specs say so); any name this server serves answers, the
    error names them. Call after the body is known to be an object."""
    if body.get("model") is None:
        raise bad(f"`model` is required: this server serves {', '.join(served)}", "model", kind="missing")


def content_required(raw: dict, role: Any, *loc) -> None:
    """A user, system or developer message must carry `content` (null is a 400, as OpenAI answers it); an
    assistant's may be null (its tool calls say it all)."""
    if role in ("user", "system", "developer") and raw.get("content") is None:
        where = f"{loc[0]}[{loc[1]}]"
        raise bad(f"{where} (a {role} message) needs `content`: a string or a list of content parts", *loc, "content")


# chat requests ----------------------------------------------------------------------------------------------
@dataclass
class ChatRequest:
    messages: list[dict]
    tools: list[dict] | None = None
    stream: bool = False
    include_usage: bool = False
    max_tokens: int | None = None
    params: GenerationParams = field(default_factory=GenerationParams)
    parallel_tool_calls: bool = True  # false: the first call the model writes is the reply's only one
    max_tool_calls: int | None = None  # Responses: the most calls the reply answers with (None: no limit)


def data_url(part: dict, *loc) -> tuple[str, str]:
    """The (format, base64) of an `image_url` / `input_image` part's data URL; anything else is a 400 (this
    server fetches nothing)."""
    url = part.get("image_url", part.get("url"))
    url = url.get("url") if isinstance(url, dict) else url
    if not isinstance(url, str) or not url.startswith("data:image/") or ";base64," not in url:
        raise bad(
            "an image part needs a data URL (data:image/png;base64,...): this server fetches nothing",
            *loc,
            "image_url",
            kind="invalid_image_url",
        )
    return url[len("data:image/") : url.index(";")], url.split(",", 1)[1]


def text_of(content: Any, *loc) -> str | list:
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
        if not isinstance(kind, str):
            raise bad("a content part needs a string `type`", *loc, i, "type")
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


def input_items(
    items: list, handlers: dict[str, Callable[[dict, int], None]], unsupported: Callable[[Any, int], BlinkError]
) -> None:
    """Responses-style `input` items (Responses, Decisions), in order: each must be an object, and goes to the
    handler of its `type` (`message` when it has none) as `handler(item, index)`; a type with no handler is
    refused with `unsupported(type, index)`."""
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise bad("an input item must be an object", "input", i)
        kind = item.get("type", "message")
        handler = handlers.get(kind) if isinstance(kind, str) else None  # a client's type may be unhashable
        if handler is None:
            raise unsupported(kind, i)
        handler(item, i)


def _message(raw: Any, i: int) -> dict:
    if not isinstance(raw, dict):
        raise bad("a message must be an object with `role` and `content`", "messages", i)
    role = raw.get("role")
    if role not in ROLES:
        raise bad(
            f"`role` must be one of system, developer, user, assistant, tool; got {role!r}", "messages", i, "role"
        )
    content_required(raw, role, "messages", i)
    msg: dict = {
        "role": "system" if role == "developer" else role,
        "content": text_of(raw.get("content"), "messages", i, "content"),
    }
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
            out.append(
                {
                    "id": call.get("id"),
                    "type": "function",
                    "function": {"name": fn["name"], "arguments": arguments_for_template(fn.get("arguments", {}))},
                }
            )
        msg["tool_calls"] = out
    if role == "assistant" and isinstance(raw.get("reasoning_content"), str):
        msg["reasoning_content"] = raw["reasoning_content"]  # earlier thinking, for templates that render it
    if role == "tool" and isinstance(raw.get("tool_call_id"), str):
        msg["tool_call_id"] = raw["tool_call_id"]
    return msg


def number(body: dict, name: str, low: float, high: float):
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise bad(f"`{name}` must be a number", name)
    if not low <= value <= high:
        raise bad(f"`{name}` must be between {low:g} and {high:g}, got {value}", name)
    return float(value)


def integer(body: dict, name: str, low: int | None = None):
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

    n = integer(body, "n", 1)
    if n is not None and n != 1:
        raise bad(f"`n` must be 1: this server returns one choice per request, got {n}", "n", kind="unsupported_value")
    stream, include_usage = streaming(body)

    max_tokens = integer(body, "max_completion_tokens", 1)
    if max_tokens is None:
        max_tokens = integer(body, "max_tokens", 1)
    tools = function_tools(body.get("tools"))
    if tool_choice(body.get("tool_choice")) == "none":
        tools = None
    parallel = body.get("parallel_tool_calls") is not False
    return ChatRequest(msgs, tools or None, bool(stream), include_usage, max_tokens, sampling(body), parallel)


def streaming(body: dict) -> tuple[bool, bool]:
    """`stream`, and `stream_options.include_usage`."""
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise bad("`stream` must be true or false", "stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise bad("`stream_options` must be an object", "stream_options")
    return bool(stream), bool((options or {}).get("include_usage"))


def sampling(body: dict) -> GenerationParams:
    """The sampling fields every generating route takes (the rest of a generation's params are added by route)."""
    return GenerationParams(
        temperature=number(body, "temperature", 0.0, 2.0),
        top_p=number(body, "top_p", 0.0, 1.0),
        top_k=integer(body, "top_k", 0),
        seed=integer(body, "seed"),
        stop=tuple(stop_sequences(body)),
    )


def stop_sequences(body: dict) -> list[str]:
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
    return stops


def function_tools(tools: Any) -> list[dict] | None:
    """Chat's `tools`: `{"type": "function", "function": {"name", "description", "parameters"}}` each."""
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise bad("`tools` must be a list of tools", "tools")
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type", "function") != "function" or not isinstance(fn, dict):
            raise bad('a tool must be {"type": "function", "function": {"name", ...}}', "tools", i)
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            raise bad("a tool's function needs a `name`", "tools", i, "function", "name")
    return tools


def tool_choice(choice: Any) -> Any:
    """`tool_choice` as chat sends it, checked: "none", "auto", "required" or a named function."""
    if (
        choice is not None
        and choice not in ("none", "auto", "required")
        and not (isinstance(choice, dict) and isinstance((choice.get("function") or {}).get("name"), str))
    ):
        raise bad(
            '`tool_choice` must be "none", "auto", "required" or {"type": "function", "function": {"name": ...}}',
            "tool_choice",
        )
    return choice


def arguments_for_template(arguments: Any) -> Any:
    """Chat templates (Qwen's among them) iterate a tool call's arguments as a mapping; OpenAI sends a JSON
    string. Parse it when it is a JSON object, else pass it through."""
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except (json.JSONDecodeError, ValueError):
            return arguments
        return parsed if isinstance(parsed, dict) else arguments
    return arguments
