"""The Responses wire's answer: the `response` object and its output items (a `reasoning` item with thinking on, a
`message` with one `output_text` part, then one `function_call` item per call), as a whole reply makes them and as
blink.api.openai.responses_stream builds them piece by piece.

Every field the Open Responses spec requires is in every response object, with the value used: `temperature` /
`top_p` the request's or the server's defaults (blink.generate.service.ChatService.defaults), `top_logprobs`,
`max_tool_calls` (enforced), no penalties (`0.0`), `completed_at` once completed. An `incomplete` response's item
that the limit cut off says `incomplete` too; a call cut off is still a `function_call` item (blink.generate.toolcalls).
"""

from __future__ import annotations

import time
import uuid

from blink.api.openai.generation import Whole
from blink.api.openai.protocol import ChatRequest
from blink.context import Context
from blink.generate.chat_engine import ChatEnd


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


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


def reasoning_tokens(count, text: str) -> int:
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
