"""What an OpenAI request asks of the decode loop beyond sampling: a constraint (blink.generate.structured) and
logprobs.

- `response_format` (chat) / `text.format` (Responses): `json_object` -> any JSON object; `json_schema` -> an
  instance of the schema (strict or not, it is enforced; a keyword the engine cannot enforce is a 400 naming it);
  `text` -> none.
- `tool_choice: "required"` or a named function -> one call (or several, unless `parallel_tool_calls: false`)
  written in the model's own markup, its arguments valid for the tool's `parameters`. With `auto`,
  `parallel_tool_calls: false` keeps the first call the model wrote (as vLLM does): nothing forces a call then.
- `logprobs` / `top_logprobs` (0-20): the blink.plan.GenerationParams fields of the same names.

`chat_params`, `responses_params` and `legacy_logprobs` return the GenerationParams fields a request adds (a
dict for `dataclasses.replace`).

Every constraint is checked here, in the main process, before a slot is taken
(blink.generate.structured.check_constraint).
"""

from __future__ import annotations

from typing import Any

from blink.api.openai.protocol import bad, integer

MAX_TOP_LOGPROBS = 20


def check_constraint(constraint: dict, loc: list) -> dict:
    from blink.generate.structured import (
        check_constraint as check,  # the grammar engine loads only when a request asks for it
    )

    return check(constraint, loc)


def response_format(value: Any, *loc) -> dict | None:
    """Chat's `response_format` (`json_schema: {name, schema, strict}` nested) or Responses' `text.format`
    (the same fields flat) as a checked constraint; None for plain text."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise bad("must be an object with a `type`: text, json_object or json_schema", *loc)
    kind = value.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return check_constraint({"type": "json_object"}, ["body", *loc])
    if kind == "json_schema":
        nested = isinstance(value.get("json_schema"), dict)
        spec = value["json_schema"] if nested else value
        where = [*loc, "json_schema"] if nested else list(loc)
        if not isinstance(spec.get("schema"), dict):
            raise bad("a json_schema format needs `schema`, a JSON Schema object", *where, "schema")
        return check_constraint(
            {"type": "json_schema", "schema": spec["schema"], "strict": spec.get("strict", True)},
            ["body", *where, "schema"],
        )
    raise bad(f"`type` must be text, json_object or json_schema; got {kind!r}", *loc, "type")


def tool_constraint(tools: list[dict] | None, choice: Any, parallel: Any) -> dict | None:
    """`tool_choice` required / named as a checked constraint over chat-shaped `tools`; None for auto/none."""
    if parallel is not None and not isinstance(parallel, bool):
        raise bad("`parallel_tool_calls` must be true or false", "parallel_tool_calls")
    if choice in (None, "auto", "none"):
        return None
    if not tools:
        raise bad(f"`tool_choice` {choice!r} needs `tools`", "tool_choice")
    functions = [{"name": t["function"]["name"], "parameters": t["function"].get("parameters")} for t in tools]
    checked = check_constraint(
        {"type": "tool_call", "tools": functions, "parallel": parallel is not False}, ["body", "tools"]
    )
    if choice == "required":
        return checked
    # chat names it under `function`, Responses at the top
    name = choice["function"].get("name") if isinstance(choice.get("function"), dict) else choice.get("name")
    named = [f for f in checked["tools"] if f["name"] == name]
    if not named:
        raise bad(f"`tool_choice` names {name!r}, which is not one of `tools`", "tool_choice")
    return {**checked, "tools": named}


def chat_logprobs(body: dict) -> dict:
    """Chat's `logprobs` (bool) and `top_logprobs` (0-20, only with logprobs)."""
    wanted = body.get("logprobs")
    if wanted is not None and not isinstance(wanted, bool):
        raise bad("`logprobs` must be true or false", "logprobs")
    top = integer(body, "top_logprobs", 0)
    if top is not None and top > MAX_TOP_LOGPROBS:
        raise bad(f"`top_logprobs` must be at most {MAX_TOP_LOGPROBS}, got {top}", "top_logprobs")
    if top and not wanted:
        raise bad("`top_logprobs` needs `logprobs: true`", "top_logprobs")
    return {"logprobs": True, "top_logprobs": top or 0} if wanted else {}


def chat_params(body: dict, tools: list[dict] | None) -> dict:
    """The generation params a chat request adds: a constraint (a forced tool call wins over `response_format`: its
    reply is the call), and logprobs."""
    constraint = tool_constraint(tools, body.get("tool_choice"), body.get("parallel_tool_calls"))
    if constraint is None:
        constraint = response_format(body.get("response_format"), "response_format")
    return {**chat_logprobs(body), **({"constraint": constraint} if constraint else {})}


def responses_params(body: dict, tools: list[dict] | None) -> dict:
    """The same for a Responses request: `text.format`, and logprobs asked by `top_logprobs` or by `include:
    ["message.output_text.logprobs"]`."""
    constraint = tool_constraint(tools, body.get("tool_choice"), body.get("parallel_tool_calls"))
    text = body.get("text")
    if text is not None and not isinstance(text, dict):
        raise bad("`text` must be an object", "text")
    if constraint is None:
        constraint = response_format((text or {}).get("format"), "text", "format")
    include = body.get("include") or []
    if not isinstance(include, list):
        raise bad("`include` must be a list", "include")
    top = integer(body, "top_logprobs", 0)
    if top is not None and top > MAX_TOP_LOGPROBS:
        raise bad(f"`top_logprobs` must be at most {MAX_TOP_LOGPROBS}, got {top}", "top_logprobs")
    wanted = top is not None or "message.output_text.logprobs" in include
    out = {"logprobs": True, "top_logprobs": top or 0} if wanted else {}
    return {**out, **({"constraint": constraint} if constraint else {})}


def legacy_logprobs(body: dict) -> dict:
    """`/v1/completions`' `logprobs`: how many alternatives per token (0-5, as OpenAI's legacy API)."""
    value = integer(body, "logprobs", 0)
    if value is None:
        return {}
    if value > 5:
        raise bad(f"`logprobs` must be at most 5, got {value}", "logprobs")
    return {"logprobs": True, "top_logprobs": value}


def legacy_entries(entries: list[dict], offset: int = 0) -> dict:
    """Token entries in the legacy shape: parallel lists, one dict of alternatives per token (`null` where an entry
    says it has none: echo's first prompt token), offsets counted in characters from `offset`."""
    text_offset, at = [], offset
    for entry in entries:
        text_offset.append(at)
        at += len(entry["token"])
    return {
        "tokens": [e["token"] for e in entries],
        "token_logprobs": [e["logprob"] for e in entries],
        "top_logprobs": [
            None
            if "top_logprobs" in e and e["top_logprobs"] is None
            else {t["token"]: t["logprob"] for t in e.get("top_logprobs") or []}
            for e in entries
        ],
        "text_offset": text_offset,
    }
