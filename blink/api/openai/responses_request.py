"""The Responses wire's request: a `POST /v1/responses` body read into a blink.api.openai.protocol.ChatRequest.

`instructions` is the system message, `input` a string (one user message) or items (`message` with `input_text` /
`output_text` / `input_image` parts, `function_call`, `function_call_output`, `reasoning`), function `tools` in the
Responses shape. What needs stored state (`previous_response_id`, `conversation`, `item_reference`, `background`) is
a 400 that says so: nothing is stored.
"""

from __future__ import annotations

from typing import Any

from blink.api.openai.protocol import (
    ChatRequest,
    arguments_for_template,
    bad,
    content_required,
    input_items,
    integer,
    number,
    sampling,
    text_of,
)
from blink.errors import InvalidRequest

STATEFUL = {"previous_response_id": "previous responses", "conversation": "conversations"}
# fields checked for their type only: name -> (the type, what the error says it must be)
TYPED = {
    "store": (bool, "true or false"),
    "stream": (bool, "true or false"),
    "metadata": (dict, "an object"),
    "safety_identifier": (str, "a string"),
    "prompt_cache_key": (str, "a string"),
    "service_tier": (str, "a string"),
}


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


def _refuse_stored_state(body: dict) -> None:
    """What needs stored state is a 400 that says so: nothing is stored here."""
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


def _check_types(body: dict) -> None:
    """The fields that are echoed or accepted as they are, checked for their type (and the penalties' range)."""
    for name, (kind, what) in TYPED.items():
        if body.get(name) is not None and not isinstance(body[name], kind):
            raise bad(f"`{name}` must be {what}", name)
    for name in ("presence_penalty", "frequency_penalty"):
        number(body, name, -2.0, 2.0)


def parse_responses(body: Any) -> ChatRequest:
    if not isinstance(body, dict):
        raise bad("the body must be a JSON object with `model` and `input`")
    if body.get("model") is not None and not isinstance(body["model"], str):
        raise bad("`model` must be a string", "model")
    _refuse_stored_state(body)
    _check_types(body)
    messages = _messages(body)
    tools = _tools(body.get("tools"))
    if _tool_choice(body.get("tool_choice")) == "none":
        tools = None
    params = sampling({k: v for k, v in body.items() if k != "stop"})  # Responses has no `stop`
    return ChatRequest(
        messages,
        tools or None,
        bool(body.get("stream")),
        False,
        integer(body, "max_output_tokens", 1),
        params,
        body.get("parallel_tool_calls") is not False,
        integer(body, "max_tool_calls", 1),
    )
