"""Structured outputs: a constraint as plain data, checked in the main process, enforced by token masks in the decode
loop.

A constraint is a plain dict (it crosses to the GPU worker as `GenerationParams.constraint`, blink.plan):

- `{"type": "json_object"}`: any JSON object;
- `{"type": "json_schema", "schema": {...}, "strict": true}`: an instance of the schema (enforced either way: a
  feature the engine cannot enforce is refused, never relaxed);
- `{"type": "tool_call", "tools": [{"name": ..., "parameters": {...}}, ...], "parallel": true}`: one tool call
  (`parallel: false`) or several, to one of `tools`, written in the model's own tool-call markup, so that
  `blink.generate.toolcalls.parse` recovers each call with arguments valid for its `parameters`.

`check_constraint` runs in the main process before any GPU work: a schema feature the engine cannot enforce, a
broken `$ref`, an unknown `format` or a regex it cannot compile is an `InvalidRequest` naming the feature and where
it sits in the body. In the worker, `Grammars` turns a checked constraint into a matcher (compiled matchers are
cached by constraint, a bounded LRU, each request gets its own copy) and `Grammars.apply_mask` removes the tokens the
matcher forbids from a logits row, EOS included until the grammar accepts.

The engine is llguidance (bench/labels/grammar.py, numbers in bench/RESULTS.md), over xgrammar, measured side by side on
this tokenizer: llguidance refuses the keywords it cannot enforce (uniqueItems, contains, propertyNames,
dependentRequired, if/then, not), naming them, where xgrammar 0.2.8 compiled allOf, uniqueItems, contains,
dependentRequired and not and then let instances violating them through, and refused valid instances of
patternProperties and if/then/else; llguidance compiles a schema in 1-25 ms where xgrammar took 36 ms to 18 s (a
pydantic model); both compute a mask in tens of microseconds per token; and llguidance installs without
dependencies, where xgrammar requires triton.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict

from blink.errors import InvalidRequest

# JSON as `json.dumps` writes it (", " and ": ", no other whitespace): a model cannot spend its budget on blanks,
# and `lenient: false` makes an unknown keyword an error instead of a silently ignored one
JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": ", "lenient": False}
TOOL_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
CACHE_SIZE = 64

# keywords whose value is a map of names to subschemas, or a list of subschemas (for locating a fault)
_NAMED = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")


# the main process ----------------------------------------------------------------------------------------------
def check_constraint(constraint: dict | None, loc: list | tuple = ("body", "response_format")) -> dict | None:
    """The constraint, checked: every schema in it compiles and every keyword in it is enforced. `loc` is where the
    schema sits in the request body (json_schema), or where the tools list sits (tool_call: a tool's fault is at
    `[*loc, i, "parameters", ...]`, `i` its index in `constraint["tools"]`). Raises `InvalidRequest`."""
    if constraint is None:
        return None
    loc = list(loc)
    kind = constraint.get("type") if isinstance(constraint, dict) else None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        schema = constraint.get("schema")
        if not isinstance(schema, dict):
            raise InvalidRequest(
                "a json_schema constraint needs `schema`, a JSON Schema object", loc=loc, kind="invalid_schema"
            )
        _check_schema(schema, loc)
        return {"type": "json_schema", "schema": schema, "strict": bool(constraint.get("strict", True))}
    if kind == "tool_call":
        tools = constraint.get("tools")
        if not isinstance(tools, list) or not tools:
            raise InvalidRequest("a tool_call constraint needs at least one tool", loc=loc, kind="invalid_tools")
        checked = []
        for i, tool in enumerate(tools):
            name = tool.get("name") if isinstance(tool, dict) else None
            if not isinstance(name, str) or not TOOL_NAME.match(name):
                raise InvalidRequest(
                    "a function name must be 1-64 letters, digits, '_', '-', '.' or ':'",
                    loc=[*loc, i, "name"],
                    kind="invalid_tools",
                )
            parameters = tool.get("parameters")
            parameters = {"type": "object", "properties": {}} if parameters is None else parameters
            if not isinstance(parameters, dict):
                raise InvalidRequest(
                    "a function's parameters must be a JSON Schema object",
                    loc=[*loc, i, "parameters"],
                    kind="invalid_schema",
                )
            _check_schema(parameters, [*loc, i, "parameters"])
            checked.append({"name": name, "parameters": parameters})
        return {"type": "tool_call", "tools": checked, "parallel": bool(constraint.get("parallel", True))}
    raise InvalidRequest(
        f"unknown constraint type {kind!r}: expected json_object, json_schema or tool_call",
        loc=loc,
        kind="invalid_constraint",
    )


def _check_schema(schema: dict, loc: list) -> None:
    from llguidance import LLMatcher

    try:
        grammar = LLMatcher.grammar_from_json_schema(schema, overrides=JSON_OPTIONS)
    except ValueError as exc:
        raise InvalidRequest(f"the schema is not valid JSON: {exc}", loc=loc, kind="invalid_schema") from None
    failed, messages = LLMatcher.validate_grammar_with_warnings(grammar)
    if not failed and not messages:
        return
    message = messages[0].strip()
    path = _fault_path(schema, message)
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path) or " (the root)"
    keys = re.match(r"Unimplemented keys: \[(.*)\]", message)
    if keys:
        names = ", ".join(k.strip().strip('"') for k in keys.group(1).split(","))
        text = (
            f"the schema uses {names} at schema{where}, which constrained decoding cannot enforce; remove it "
            "(a keyword is never silently ignored)"
        )
    else:
        lines = [line.strip() for line in message.splitlines() if line.strip()]
        detail = lines[0] if len(lines) == 1 else f"{lines[0]} {lines[-1]}"  # a regex error: what, then why
        text = f"the schema cannot be enforced at schema{where}: {detail}"
    raise InvalidRequest(text, loc=[*loc, *path], kind="unsupported_schema_feature")


def _fault_path(schema, message: str) -> list:
    """Where in the schema the engine's complaint points: the first subschema holding an unimplemented keyword,
    the unknown format, the regex or the `$ref` the message names. [] when it names none of them."""
    keys = re.match(r"Unimplemented keys: \[(.*)\]", message)
    wanted = {k.strip().strip('"') for k in keys.group(1).split(",")} if keys else set()

    def faulty(node: dict) -> str | None:
        hit = next((k for k in node if k in wanted), None)
        if hit:
            return hit
        fmt, pattern, ref = node.get("format"), node.get("pattern"), node.get("$ref")
        if isinstance(fmt, str) and f"format: {fmt}" in message:
            return "format"
        if isinstance(pattern, str) and pattern and pattern in message:
            return "pattern"
        if isinstance(ref, str) and ref.lstrip("#") and f"'{ref.lstrip('#')}'" in message:
            return "$ref"
        return None

    def walk(node, path):
        if not isinstance(node, dict):
            return None
        hit = faulty(node)
        if hit:
            return [*path, hit]
        for key, value in node.items():
            if key in _NAMED and isinstance(value, dict):
                children = [([key, name], sub) for name, sub in value.items()]
            elif key in _LISTS and isinstance(value, list):
                children = [([key, i], sub) for i, sub in enumerate(value)]
            elif isinstance(value, dict) and key not in ("const", "default", "enum", "examples"):
                children = [([key], value)]
            else:
                continue
            for sub_path, sub in children:
                found = walk(sub, [*path, *sub_path])
                if found:
                    return found
        return None

    return walk(schema, []) or []


# the GPU worker ------------------------------------------------------------------------------------------------
def lark_grammar(constraint: dict, tool_format: str = "json", reasoning: bool = False) -> str:
    """The llguidance grammar text of a checked constraint. `tool_format` is the model's tool-call markup:
    "json" (`<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`, Hermes / Qwen3) or "xml"
    (`<tool_call>\\n<function=NAME>\\n<parameter=KEY>\\nVALUE\\n</parameter>\\n</function>\\n</tool_call>`,
    Qwen3.5). With `reasoning` (thinking on), free text up to `</think>` comes first, and the constraint after it."""
    from llguidance import LLMatcher

    kind = constraint["type"]
    schema = {"type": "object"} if kind == "json_object" else constraint.get("schema")
    if schema is not None and not reasoning:
        return LLMatcher.grammar_from_json_schema(schema, overrides=JSON_OPTIONS)
    lines = [r"think: <think>? THOUGHT </think> /\n*/", r"THOUGHT: /(.|\n)*/"] if reasoning else []
    head = "start: think answer" if reasoning else "start: answer"
    if schema is not None:
        return LLMatcher.grammar_from_lark("\n".join([head, f"answer: {_embedded(schema)}", *lines]))
    names = []
    for i, tool in enumerate(constraint["tools"]):
        names.append(f"call_{i}")
        lines.append(
            f"call_{i}: "
            + (_xml_call(tool) if tool_format == "xml" and _flat(tool["parameters"]) else _json_call(tool))
        )
    repeat = ' ("\\n" call)*' if constraint["parallel"] else ""
    lines = [
        head,
        f"answer: call{repeat}",
        'call: <tool_call> "\\n" (' + " | ".join(names) + ') "\\n" </tool_call>',
        *lines,
    ]
    return LLMatcher.grammar_from_lark("\n".join(lines))


def _embedded(schema: dict) -> str:
    return "%json " + json.dumps({**schema, "x-guidance": JSON_OPTIONS})


def _json_call(tool: dict) -> str:
    head = json.dumps('{"name": ' + json.dumps(tool["name"]) + ', "arguments": ')
    return f'{head} {_embedded(tool["parameters"])} "}}"'


def _flat(parameters: dict) -> bool:
    """An object schema listing its properties: what the XML markup (one `<parameter=KEY>` per key) can carry."""
    allowed = {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "title",
        "description",
        "$defs",
        "definitions",
        "$schema",
        "strict",
    }
    return (
        parameters.get("type") == "object"
        and isinstance(parameters.get("properties"), dict)
        and set(parameters) <= allowed
    )


def _xml_call(tool: dict) -> str:
    """`<function=NAME>` with one `<parameter=KEY>` per property, in the schema's order (required ones always),
    each value JSON for its property's schema: the parser reads a value as JSON first."""
    parameters = tool["parameters"]
    required = set(parameters.get("required") or [])
    defs = {k: parameters[k] for k in ("$defs", "definitions") if k in parameters}
    parts = [json.dumps(f"<function={tool['name']}>\n")]
    for key, sub in parameters["properties"].items():
        sub = sub if isinstance(sub, dict) else {}
        item = f'({json.dumps(f"<parameter={key}>" + chr(10))} {_embedded({**sub, **defs})} "\\n</parameter>\\n")'
        parts.append(item if key in required else item + "?")
    parts.append(json.dumps("</function>"))
    return " ".join(parts)


class Grammars:
    """Matchers for checked constraints on one tokenizer, compiled once per constraint (a bounded LRU cache)."""

    def __init__(
        self,
        tokenizer,
        vocab_size: int,
        eos_ids: list[int],
        tool_format: str = "json",
        reasoning: bool = False,
        size: int = CACHE_SIZE,
    ):
        self.hf_tokenizer = tokenizer
        self.vocab_size = int(vocab_size)
        self.eos_ids = list(eos_ids)
        self.tool_format = tool_format
        self.reasoning = reasoning
        self.size = size
        self._tokenizer = None
        self.mask_size = self.vocab_size
        self._cache: OrderedDict[str, object] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def tokenizer(self):
        """llguidance's view of the tokenizer (its token trie; about a second to build for a 248k vocabulary)."""
        with self._lock:
            if self._tokenizer is None:
                import llguidance.hf

                # the tokenizer may hold more tokens than the model has logits (the decision engine adds its
                # sentinels): the mask covers both, and tokens past the logits are never drawn
                self.mask_size = max(self.vocab_size, len(self.hf_tokenizer))
                self._tokenizer = llguidance.hf.from_tokenizer(
                    self.hf_tokenizer, n_vocab=self.mask_size, eos_token=self.eos_ids
                )
            return self._tokenizer

    def matcher(self, constraint: dict):
        """A fresh matcher at the start of the constraint's grammar."""
        from llguidance import LLMatcher

        key = json.dumps([constraint, self.tool_format, self.reasoning], sort_keys=True)
        tokenizer = self.tokenizer
        with self._lock:
            compiled = self._cache.get(key)
            if compiled is not None:
                self._cache.move_to_end(key)
        if compiled is None:
            compiled = LLMatcher(tokenizer, lark_grammar(constraint, self.tool_format, self.reasoning), log_level=0)
            if compiled.is_error():  # check_constraint ran in the main process: this is our fault, not the client's
                raise RuntimeError(f"the constraint's grammar did not compile: {compiled.get_error()}")
            with self._lock:
                self._cache[key] = compiled
                while len(self._cache) > self.size:
                    self._cache.popitem(last=False)
        return compiled.deep_copy()

    def apply_mask(self, logits, matcher) -> None:
        """Set to -inf, in place, every logit the matcher forbids at this step (a 1-D row of the model's
        vocabulary). The mask is computed and unpacked on the CPU (a bit per token, little-endian words)."""
        import numpy as np
        import torch
        from llguidance.torch import allocate_token_bitmask, fill_next_token_bitmask

        bitmask = allocate_token_bitmask(1, self.mask_size)
        fill_next_token_bitmask(matcher, bitmask, 0)
        allowed = np.unpackbits(bitmask.numpy().view(np.uint8), bitorder="little")[: logits.shape[-1]]
        forbidden = torch.from_numpy(allowed).to(logits.device, non_blocking=True) == 0
        logits.masked_fill_(forbidden, float("-inf"))
