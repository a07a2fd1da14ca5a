"""`POST /v1/responses`: OpenAI's Responses wire over the same chat turn (blink.api.openai.chat.start: the model's
chat template, the same slots, admission and error shape), answered as a `response` object or as its events.

A request becomes a blink.api.openai.protocol.ChatRequest: `instructions` is the system message, `input` a string
(one user message) or items (`message` with `input_text` / `output_text` / `input_image` parts,
`function_call`, `function_call_output`, `reasoning`), function `tools` in the Responses shape. Nothing is
stored: `store` is answered `false`, and what needs stored state (`previous_response_id`, `conversation`,
`item_reference`, `background`) is a 400 that says so.

Output items: a `reasoning` item (with thinking on), a `message` with one `output_text` part, then one
`function_call` item per call. Streamed: `response.created`, `response.in_progress`, then per item
`response.output_item.added`, its deltas (`response.reasoning_text.delta`, `response.content_part.added` /
`response.output_text.delta` / `.done`, `response.function_call_arguments.delta` / `.done`),
`response.output_item.done`, and `response.completed` (`response.incomplete` when the output budget ran out).
A failure after the headers is an `error` event, then `response.failed`.

Every field the Open Responses spec requires is in every response object, with the value used: `temperature` /
`top_p` the request's or the server's defaults (blink.generate.service.ChatService.defaults), `top_logprobs`,
`max_tool_calls` (enforced), no penalties (`0.0`), `completed_at` once completed. An `incomplete` response's item
that the limit cut off says `incomplete` too; a call cut off is still a `function_call` item (blink.generate.toolcalls).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from starlette.routing import Route

from blink.api.openai.chat import start
from blink.api.openai.constraints import responses_params
from blink.api.openai.generation import (
    Calls,
    Content,
    Reasoning,
    Reply,
    Whole,
    as_blink_error,
    sse,
    sse_response,
    whole,
)
from blink.api.openai.protocol import (
    WIRE,
    ChatRequest,
    arguments_for_template,
    bad,
    content_required,
    input_items,
    integer,
    number,
    render,
    require_model,
    sampling,
    text_of,
)
from blink.context import Context
from blink.errors import EngineFailure, InvalidRequest
from blink.generate.chat_engine import ChatEnd
from blink.web.endpoint import Body, Call, Endpoint
from blink.web.streams import KEEPALIVE

log = logging.getLogger("blink")

STATEFUL = {"previous_response_id": "previous responses", "conversation": "conversations"}


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


# the request ------------------------------------------------------------------------------------------------
def _tools(tools: Any) -> list[dict] | None:
    """Responses' flat function tools as chat's `{"type": "function", "function": {...}}`."""
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise bad("`tools` must be a list of tools", "tools")
    out = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") != "function":
            kind = tool.get("type") if isinstance(tool, dict) else None
            raise bad(
                f"tool type {kind!r} is not supported: this server runs function tools only",
                "tools",
                i,
                "type",
                kind="unsupported_tool",
            )
        if not isinstance(tool.get("name"), str) or not tool["name"]:
            raise bad("a function tool needs a `name`", "tools", i, "name")
        fn = {k: tool[k] for k in ("name", "description", "parameters", "strict") if tool.get(k) is not None}
        out.append({"type": "function", "function": fn})
    return out


def echoed_tool(tool: dict) -> dict:
    """A function tool as the response lists it: every field the spec requires (null where the request sent
    none)."""
    return {
        **tool,
        "type": "function",
        "name": tool["name"],
        "description": tool.get("description"),
        "parameters": tool.get("parameters"),
        "strict": tool.get("strict"),
    }


def _tool_choice(choice: Any) -> Any:
    if choice is None or choice in ("none", "auto", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return choice
    raise bad('`tool_choice` must be "none", "auto", "required" or {"type": "function", "name": ...}', "tool_choice")


class _Conversation:
    """Responses' input items as chat messages. A `reasoning` item's text waits for the assistant message that
    follows it; function calls after an assistant turn (or after each other) join it as parallel calls."""

    def __init__(self, messages: list[dict]):
        self.messages = messages
        self.thought = None  # a reasoning item's text, for the assistant turn that follows it

    @property
    def handlers(self) -> dict:
        return {
            "message": self.message,
            "function_call": self.function_call,
            "function_call_output": self.function_call_output,
            "reasoning": self.reasoning,
            "item_reference": self.item_reference,
        }

    def message(self, item: dict, i: int) -> None:
        role = item.get("role")
        if role not in ("user", "system", "developer", "assistant"):
            raise bad(f"`role` must be user, system, developer or assistant; got {role!r}", "input", i, "role")
        content_required(item, role, "input", i)
        msg = {
            "role": "system" if role == "developer" else role,
            "content": text_of(item.get("content"), "input", i, "content"),
        }
        if role == "assistant" and self.thought is not None:
            msg["reasoning_content"], self.thought = self.thought, None
        self.messages.append(msg)

    def function_call(self, item: dict, i: int) -> None:
        if not isinstance(item.get("name"), str) or not isinstance(item.get("call_id"), str):
            raise bad("a function_call item needs `call_id` and `name`", "input", i)
        call = {
            "id": item["call_id"],
            "type": "function",
            "function": {"name": item["name"], "arguments": arguments_for_template(item.get("arguments", {}))},
        }
        last = self.messages[-1] if self.messages else None
        if last is not None and last["role"] == "assistant" and (last.get("tool_calls") or not last["content"]):
            last.setdefault("tool_calls", []).append(call)  # parallel calls: one assistant turn
        else:
            self.messages.append({"role": "assistant", "content": "", "tool_calls": [call]})

    def function_call_output(self, item: dict, i: int) -> None:
        if not isinstance(item.get("call_id"), str):
            raise bad("a function_call_output item needs `call_id`", "input", i, "call_id")
        self.messages.append(
            {
                "role": "tool",
                "tool_call_id": item["call_id"],
                "content": text_of(item.get("output"), "input", i, "output"),
            }
        )

    def reasoning(self, item: dict, i: int) -> None:
        parts = item.get("content") or item.get("summary") or []
        self.thought = "\n".join(p.get("text", "") for p in parts if isinstance(p, dict)) or None

    @staticmethod
    def item_reference(item: dict, i: int) -> None:
        raise bad(
            "`item_reference` needs stored items: this server stores nothing; send the item itself",
            "input",
            i,
            "type",
            kind="unsupported_value",
        )


def _unsupported_item(kind: Any, i: int) -> InvalidRequest:
    return bad(f"input item type {kind!r} is not supported", "input", i, "type", kind="unsupported_value")


def _messages(body: dict) -> list[dict]:
    messages: list[dict] = []
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise bad("`instructions` must be a string", "instructions")
        messages.append({"role": "system", "content": instructions})
    value = body.get("input")
    if value is None:
        raise bad("`input` is required", "input", kind="missing")
    if isinstance(value, str):
        return [*messages, {"role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise bad("`input` must be a string or a non-empty list of input items", "input")
    conversation = _Conversation(messages)
    input_items(value, conversation.handlers, _unsupported_item)
    return conversation.messages


def parse_responses(body: Any) -> ChatRequest:
    if not isinstance(body, dict):
        raise bad("the body must be a JSON object with `model` and `input`")
    if body.get("model") is not None and not isinstance(body["model"], str):
        raise bad("`model` must be a string", "model")
    for name, what in STATEFUL.items():
        if body.get(name) is not None:
            raise bad(
                f"`{name}` is not supported: this server stores no {what} (every response is `store: false`);"
                " send the whole conversation in `input`",
                name,
                kind="unsupported_parameter",
            )
    if body.get("background"):
        raise bad(
            "`background` is not supported: this server stores no responses to poll",
            "background",
            kind="unsupported_parameter",
        )
    if body.get("store") is not None and not isinstance(body["store"], bool):
        raise bad("`store` must be true or false", "store")
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise bad("`stream` must be true or false", "stream")
    if body.get("metadata") is not None and not isinstance(body["metadata"], dict):
        raise bad("`metadata` must be an object", "metadata")
    for name in ("safety_identifier", "prompt_cache_key", "service_tier"):
        if body.get(name) is not None and not isinstance(body[name], str):
            raise bad(f"`{name}` must be a string", name)
    for name in ("presence_penalty", "frequency_penalty"):
        number(body, name, -2.0, 2.0)
    messages = _messages(body)
    tools = _tools(body.get("tools"))
    if _tool_choice(body.get("tool_choice")) == "none":
        tools = None
    params = sampling({k: v for k, v in body.items() if k != "stop"})  # Responses has no `stop`
    return ChatRequest(
        messages,
        tools or None,
        bool(stream),
        False,
        integer(body, "max_output_tokens", 1),
        params,
        body.get("parallel_tool_calls") is not False,
        integer(body, "max_tool_calls", 1),
    )


# the response -----------------------------------------------------------------------------------------------
class Shape:
    """One response's fixed fields (echoed from the request) and its items as they are made."""

    def __init__(self, ctx: Context, body: dict, req: ChatRequest):
        self.id = _new_id("resp")
        self.created = int(time.time())
        defaults = ctx.chats.defaults
        used = {  # the sampling values the generation runs with: the request's, else the server's defaults
            name: float(defaults[name] if getattr(req.params, name) is None else getattr(req.params, name))
            for name in ("temperature", "top_p")
        }
        self.fields = {
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"),
            "metadata": body.get("metadata") or {},
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "previous_response_id": None,
            "reasoning": {"effort": None, "summary": None},
            "store": False,
            "temperature": used["temperature"],
            "text": body.get("text") or {"format": {"type": "text"}},
            "tool_choice": body.get("tool_choice") or "auto",
            "tools": [echoed_tool(t) for t in body.get("tools") or []],
            "top_p": used["top_p"],
            "presence_penalty": 0.0,  # no penalties are applied (a request's are accepted and not used)
            "frequency_penalty": 0.0,
            "top_logprobs": int(req.params.top_logprobs or 0),
            "max_tool_calls": req.max_tool_calls,
            "truncation": "disabled",
            "user": body.get("user"),
            "background": False,
            "service_tier": "default",
            "safety_identifier": body.get("safety_identifier"),
            "prompt_cache_key": body.get("prompt_cache_key"),
        }
        self.model = ctx.served_name
        tokenizer = ctx.chats.tokenizer
        self.count = lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])

    def body(
        self,
        status: str,
        output: list[dict],
        final: ChatEnd | None = None,
        reasoning: str = "",
        error: dict | None = None,
    ) -> dict:
        out = {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "completed_at": int(time.time()) if status == "completed" else None,
            "status": status,
            "error": error,
            "incomplete_details": None,
            "model": self.model,
            "output": output,
            **self.fields,
            "usage": None,
        }
        if status == "incomplete":
            out["incomplete_details"] = {"reason": "max_output_tokens"}
        if final is not None:
            out["usage"] = usage(final, reasoning)
        return out


def usage(final: ChatEnd, reasoning_tokens: int | str = 0) -> dict:
    p, c = final.prompt_tokens, final.completion_tokens
    return {
        "input_tokens": p,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": c,
        "output_tokens_details": {"reasoning_tokens": int(reasoning_tokens or 0)},
        "total_tokens": p + c,
    }


def reasoning_item(text: str, status: str = "completed", item_id: str | None = None) -> dict:
    return {
        "type": "reasoning",
        "id": item_id or _new_id("rs"),
        "summary": [],
        "status": status,
        "content": [{"type": "reasoning_text", "text": text}] if text else [],
    }


def text_part(text: str, logprobs: list | None = None) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}


def message_item(parts: list[dict], status: str = "completed", item_id: str | None = None) -> dict:
    return {"type": "message", "id": item_id or _new_id("msg"), "status": status, "role": "assistant", "content": parts}


def call_item(call: dict, status: str = "completed", arguments: str | None = None) -> dict:
    fn = call["function"]
    return {
        "type": "function_call",
        "id": _new_id("fc"),
        "call_id": call["id"],
        "name": fn["name"],
        "arguments": fn["arguments"] if arguments is None else arguments,
        "status": status,
    }


def _reasoning_tokens(count, text: str) -> int:
    return count(text) if count and text else 0


def status_of(end: ChatEnd, calls: bool, truncated: bool) -> str:
    """`incomplete` when the output budget ran out (before any call, or in the middle of one), else `completed`."""
    return "incomplete" if end.finish_reason == "length" and (truncated or not calls) else "completed"


def output_of(got: Whole, status: str) -> list[dict]:
    """The items of a whole reply; with an incomplete response, the item the limit cut off says so."""

    def state(cut_here: bool) -> str:
        return "incomplete" if status == "incomplete" and cut_here else "completed"

    items = [reasoning_item(got.reasoning, state(not got.content and not got.calls))] if got.reasoning else []
    if got.content or not got.calls:
        items.append(message_item([text_part(got.content, got.logprobs)], state(not got.calls)))
    last = len(got.calls) - 1
    return items + [call_item(c, state(i == last)) for i, c in enumerate(got.calls)]


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
            return shape.body(status, output_of(got, status), got.final, _reasoning_tokens(shape.count, got.reasoning))
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


class _Events:
    """The numbered events of one streamed response, and the items it has made so far."""

    def __init__(self):
        self.number = 0
        self.output: list[dict] = []

    def __call__(self, kind: str, **fields) -> str:
        event = {"type": kind, "sequence_number": self.number, **fields}
        self.number += 1
        return sse(event, kind)


class ResponseStream:
    """The events of one streamed response. At most one reasoning item and one message are open at a time, their
    text still coming; an item is done before the next is added (`close_open`); function calls are added whole.
    Each method returns the event lines it made, numbered in order."""

    def __init__(self, shape: Shape):
        self.shape = shape
        self.emit = _Events()
        self.output = self.emit.output
        self.reasoning: dict | None = None  # the open reasoning item
        self.message: dict | None = None  # the open message
        self.thought: list[str] = []
        self.text: list[str] = []
        self.logprobs: list = []
        self.truncated = False  # the last call was cut off by the token limit

    def start(self) -> list[str]:
        return [
            self.emit("response.created", response=self.shape.body("in_progress", [])),
            self.emit("response.in_progress", response=self.shape.body("in_progress", [])),
        ]

    def on(self, piece) -> list[str]:
        """The lines one piece of the reply makes."""
        if piece is KEEPALIVE:
            return [": keep-alive\n\n"]
        if isinstance(piece, Reasoning):
            return self.add_reasoning(piece.text)
        if isinstance(piece, Content):
            return self.add_text(piece.text, piece.logprobs or [])
        if isinstance(piece, Calls):
            self.truncated = piece.truncated
            return self.close_open() + self.add_calls(piece.calls)
        if isinstance(piece, ChatEnd):
            return self.finish(piece)
        return []

    def open_reasoning(self) -> list[str]:
        self.reasoning = reasoning_item("", "in_progress")
        self.output.append(self.reasoning)
        return [self.emit("response.output_item.added", output_index=len(self.output) - 1, item=self.reasoning)]

    def add_reasoning(self, text: str) -> list[str]:
        lines = self.open_reasoning() if self.reasoning is None else []
        self.thought.append(text)
        index = self.output.index(self.reasoning)
        delta = self.emit(
            "response.reasoning_text.delta",
            item_id=self.reasoning["id"],
            output_index=index,
            content_index=0,
            delta=text,
        )
        return [*lines, delta]

    def open_message(self) -> list[str]:
        self.message = message_item([], "in_progress")
        self.output.append(self.message)
        index = len(self.output) - 1
        return [
            self.emit("response.output_item.added", output_index=index, item=self.message),
            self.emit(
                "response.content_part.added",
                item_id=self.message["id"],
                output_index=index,
                content_index=0,
                part=text_part(""),
            ),
        ]

    def add_text(self, text: str, logprobs: list) -> list[str]:
        lines = self.close_open() + self.open_message() if self.message is None else []
        self.text.append(text)
        self.logprobs.extend(logprobs)
        delta = self.emit(
            "response.output_text.delta",
            item_id=self.message["id"],
            output_index=self.output.index(self.message),
            content_index=0,
            delta=text,
            logprobs=logprobs,
        )
        return [*lines, delta]

    def close_open(self, status: str = "completed") -> list[str]:
        """Finish the reasoning item and the message still open (`incomplete`: the token limit cut them off; a
        reasoning item followed by a message was done before it)."""
        reasoning = "completed" if self.message is not None else status
        return self._close_reasoning(reasoning) + self._close_message(status)

    def _close_reasoning(self, status: str = "completed") -> list[str]:
        if self.reasoning is None:
            return []
        item = reasoning_item("".join(self.thought), status, item_id=self.reasoning["id"])
        index = self.output.index(self.reasoning)
        self.output[index], self.reasoning = item, None
        return [
            self.emit(
                "response.reasoning_text.done",
                item_id=item["id"],
                output_index=index,
                content_index=0,
                text=item["content"][0]["text"] if item["content"] else "",
            ),
            self.emit("response.output_item.done", output_index=index, item=item),
        ]

    def _close_message(self, status: str = "completed") -> list[str]:
        if self.message is None:
            return []
        part = text_part("".join(self.text), self.logprobs)
        item = message_item([part], status, item_id=self.message["id"])
        index = self.output.index(self.message)
        self.output[index], self.message = item, None
        return [
            self.emit(
                "response.output_text.done",
                item_id=item["id"],
                output_index=index,
                content_index=0,
                text=part["text"],
                logprobs=part["logprobs"],
            ),
            self.emit("response.content_part.done", item_id=item["id"], output_index=index, content_index=0, part=part),
            self.emit("response.output_item.done", output_index=index, item=item),
        ]

    def add_calls(self, calls: list[dict]) -> list[str]:
        """Each call added whole; a last one the token limit cut off is done as `incomplete`."""
        lines = []
        for n, c in enumerate(calls):
            added = call_item(c, "in_progress", arguments="")
            self.output.append(added)
            index = len(self.output) - 1
            args = c["function"]["arguments"]
            lines += [
                self.emit("response.output_item.added", output_index=index, item=added),
                self.emit(
                    "response.function_call_arguments.delta", item_id=added["id"], output_index=index, delta=args
                ),
                self.emit(
                    "response.function_call_arguments.done",
                    item_id=added["id"],
                    output_index=index,
                    name=added["name"],
                    arguments=args,
                ),
            ]
            cut = self.truncated and n == len(calls) - 1
            self.output[index] = {**added, "arguments": args, "status": "incomplete" if cut else "completed"}
            lines.append(self.emit("response.output_item.done", output_index=index, item=self.output[index]))
        return lines

    def finish(self, end: ChatEnd) -> list[str]:
        """The last items closed (an empty answer is still a message), then `response.completed` (or
        `response.incomplete` when the output budget ran out before any call)."""
        calls = any(item["type"] == "function_call" for item in self.output)
        status = status_of(end, calls, self.truncated)
        lines = []
        if not calls and not any(item["type"] == "message" for item in self.output):
            lines += self.close_open() + self.open_message()
        lines += self.close_open("incomplete" if status == "incomplete" and not calls else "completed")
        tokens = _reasoning_tokens(self.shape.count, "".join(self.thought))
        kind = "response.incomplete" if status == "incomplete" else "response.completed"
        return [*lines, self.emit(kind, response=self.shape.body(status, self.output, end, tokens))]

    def fail(self, exc: BaseException) -> list[str]:
        """After the headers, a failure is an `error` event, then `response.failed`."""
        error = as_blink_error(exc)
        if isinstance(error, EngineFailure):
            log.error("response %s failed: %s", self.shape.id, error.message)
        body = render(error)[1]["error"]
        return [
            self.emit("error", code=body["code"], message=body["message"], param=body["param"]),
            self.emit(
                "response.failed",
                response=self.shape.body(
                    "failed", self.output, error={"code": body["code"], "message": body["message"]}
                ),
            ),
        ]


async def events(shape: Shape, reply: Reply) -> AsyncIterator[str]:
    stream = ResponseStream(shape)
    for line in stream.start():
        yield line
    try:
        async for piece in reply:
            for line in stream.on(piece):
                yield line
    except Exception as exc:  # noqa: BLE001 - headers are sent: report in the stream, then end it cleanly
        for line in stream.fail(exc):
            yield line
