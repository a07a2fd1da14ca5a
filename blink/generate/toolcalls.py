"""Tool calls parsed out of generated text, in the main process (the GPU step only ever yields text).

Models of one family don't agree on how they write a call, so every form seen in practice is accepted:

1. tagged JSON: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (Hermes / Qwen), several per turn;
2. XML-style calls, with or without a `<tool_call>` wrapper:
   `<function=NAME><parameter=KEY>VALUE</parameter>...</function>` (Qwen3-Coder / Qwen3.5), and
   `<name>NAME</name><arguments>{...}</arguments>` inside `<tool_call>`, `<function_call>` or `<functioncall>`;
3. a bare JSON object `{"name": ..., "arguments"|"parameters": {...}}` (or a list of them) that IS the whole
   response (Llama-style);
4. the same, wrapped in one markdown code fence (```json ... ```) that is the whole response.

Forms 3 and 4 count only when they are the entire response and name an offered tool: prose that shows or
explains JSON is not a call. Tags are explicit markup and count wherever they appear.

`ToolStream` streams text until a possible call begins, then buffers the rest, so raw call markup never
reaches the client as content.

A call cut off by the token limit (`parse(..., truncated=True)`: the generation ended with `length` inside an
unclosed wrapper) is still a call, as OpenAI answers it: its name, and its `arguments` as far as they were
written (not valid JSON); `Parsed.truncated` says the last call is such a one. Its markup never reaches content.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from blink.generate.text import partial_marker_length

WRAPPERS = ("tool_call", "function_call", "functioncall")
# a wrapper block; the last one may be unclosed when generation stopped inside it
_WRAPPED = re.compile(r"<(tool_call|function_call|functioncall)>(.*?)(?:</\1>|\Z)", re.S)
_FUNCTION_EQ = re.compile(r"<function=([^>\n]+)>(.*?)(?:</function>|\Z)", re.S)
_PARAMETER_EQ = re.compile(r"<parameter=([^>\n]+)>(.*?)(?:</parameter>|(?=<parameter=)|\Z)", re.S)
_NAME_ARGS = re.compile(r"^\s*<name>\s*([^<]+?)\s*</name>\s*<(arguments|parameters)>(.*?)</\2>\s*$", re.S)
_WHOLE_FENCE = re.compile(r"^\s*```[A-Za-z0-9_+-]*[ \t]*\n(.*?)\n?[ \t]*```\s*$", re.S)
_EMPTY_FENCE = re.compile(r"```[A-Za-z0-9_+-]*\s*```")

# where a call may begin, for streaming
START_MARKERS = tuple(f"<{w}>" for w in WRAPPERS) + ("<function=",)


@dataclass
class Parsed:
    calls: list[dict] = field(default_factory=list)  # OpenAI `tool_calls` entries, each with `index`
    content: str | None = None  # the text that is not a call (None when empty)
    truncated: bool = False  # the last call was cut off by the token limit (its arguments are partial)


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


def _as_call(obj: Any, names: set[str] | None, strict: bool) -> dict | None:
    """A {name, arguments} pair from a decoded JSON object, or None when it does not look like a call."""
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("function"), dict) and "name" not in obj:  # {"type":"function","function":{...}}
        obj = obj["function"]
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return None
    if "arguments" in obj:
        args = obj["arguments"]
    elif "parameters" in obj:
        args = obj["parameters"]
    elif set(obj) == {"name"}:
        args = {}
    else:
        return None
    if strict and names is not None and name not in names:
        return None
    return {"name": name.strip(), "arguments": args}


def _parameter_value(raw: str) -> Any:
    text = raw.strip("\n")
    try:
        return json.loads(text)
    except (json.JSONDecodeError, ValueError):
        return text


def _inner_calls(inner: str, names: set[str] | None) -> list[dict] | None:
    """The calls inside one wrapper block (JSON, `<function=...>` or `<name>/<arguments>`), or None."""
    body = inner.strip()
    if body.startswith("{") or body.startswith("["):
        try:
            obj = json.loads(body)
        except (json.JSONDecodeError, ValueError):
            return None
        objs = obj if isinstance(obj, list) else [obj]
        calls = [_as_call(o, names, strict=False) for o in objs]
        return calls if calls and all(calls) else None
    functions = list(_FUNCTION_EQ.finditer(body))
    if functions:
        return [_function_eq_call(m) for m in functions]
    m = _NAME_ARGS.match(body)
    if m:
        raw = m.group(3).strip()
        try:
            args = json.loads(raw) if raw else {}
        except (json.JSONDecodeError, ValueError):
            args = raw
        return [{"name": m.group(1).strip(), "arguments": args}]
    return None


def _function_eq_call(m: re.Match) -> dict:
    args = {p.group(1).strip(): _parameter_value(p.group(2)) for p in _PARAMETER_EQ.finditer(m.group(2))}
    return {"name": m.group(1).strip(), "arguments": args}


def _openai(calls: list[dict]) -> list[dict]:
    out = []
    for index, call in enumerate(calls):
        args = call["arguments"]
        if not isinstance(args, str):
            args = json.dumps(args if args is not None else {}, ensure_ascii=False)
        out.append(
            {
                "index": index,
                "id": new_call_id(),
                "type": "function",
                "function": {"name": call["name"], "arguments": args},
            }
        )
    return out


def _tidy(text: str) -> str | None:
    text = _EMPTY_FENCE.sub("", text).strip()
    return text or None


def _tagged(text: str, names: set[str] | None) -> tuple[list[dict], list[tuple[int, int]]]:
    """Every tagged call in the order it appears, and the spans of text the calls occupy."""
    located: list[tuple[int, list[dict]]] = []
    spans: list[tuple[int, int]] = []
    for m in _WRAPPED.finditer(text):
        found = _inner_calls(m.group(2), names)
        if found:
            located.append((m.start(), found))
            spans.append(m.span())
    for m in _FUNCTION_EQ.finditer(text):  # <function=...> blocks outside any wrapper
        if not any(a <= m.start() < b for a, b in spans):
            located.append((m.start(), [_function_eq_call(m)]))
            spans.append(m.span())
    located.sort(key=lambda item: item[0])
    return [call for _, found in located for call in found], sorted(spans)


_PARTIAL_NAME = re.compile(r'"name"\s*:\s*"((?:[^"\\]|\\.)*)"')
_PARTIAL_ARGS = re.compile(r'"(?:arguments|parameters)"\s*:\s*', re.S)
_PARTIAL_NAME_BEGUN = re.compile(r'<function=([^>\n]*)\Z|"name"\s*:\s*"((?:[^"\\]|\\.)*)\Z')


def _unclosed(text: str) -> tuple[int, str] | None:
    """Where the last call markup opened and never closed starts, and its marker; None when every call closed."""
    start, marker = max((text.rfind(m), m) for m in START_MARKERS)
    if start < 0:
        return None
    if marker == "<function=":
        wrapped = [text.rfind(m, 0, start) for m in START_MARKERS[: len(WRAPPERS)]]
        closing = "</function>"
        outer = max(wrapped)
        if outer >= 0 and not any(f"</{w}>" in text[outer:] for w in WRAPPERS):
            start = outer  # `<tool_call><function=...`: the wrapper is where the markup starts
    else:
        closing = f"</{marker[1:-1]}>"
    return None if closing in text[start:] else (start, marker)


def _cut_call(inner: str, names: set[str] | None) -> dict:
    """A call cut off inside its wrapper before its name was closed, or a JSON call cut off anywhere: its name
    (a partly written one completed when it begins exactly one tool's name) and the raw text of its arguments so
    far."""
    name = _PARTIAL_NAME.search(inner)
    if name is not None:
        try:
            written = json.loads(f'"{name.group(1)}"')
        except (json.JSONDecodeError, ValueError):
            written = name.group(1)
        args = _PARTIAL_ARGS.search(inner, name.end()) or _PARTIAL_ARGS.search(inner)
        return {"name": written, "arguments": inner[args.end() :].rstrip() if args else ""}
    begun = _PARTIAL_NAME_BEGUN.search(inner)
    prefix = (begun.group(1) or begun.group(2) or "") if begun else ""
    matching = sorted(n for n in names or () if n.startswith(prefix))
    return {"name": matching[0] if len(matching) == 1 else prefix, "arguments": ""}


def parse(text: str, tool_names: list[str] | set[str] | None = None, truncated: bool = False) -> Parsed:
    """Tool calls in `text` (OpenAI shape, indexed in order) and the remaining content.
    Without calls, `content` is the text unchanged. `truncated`: the generation ended at the token limit, so an
    unclosed call at the end is a cut-off call (see the module's docstring)."""
    names = set(tool_names) if tool_names is not None else None
    calls, spans = _tagged(text, names)
    cut = _unclosed(text) if truncated else None
    if cut is not None:
        at, marker = cut
        if any(a <= at < b for a, b in spans) or any(a == at for a, _ in spans):
            return Parsed(*_finish(text, calls, spans), truncated=True)  # read already (`<function=` unclosed)
        calls, spans = _tagged(text[:at], names)
        calls.append(_cut_call(text[at + len(marker) :], names))
        return Parsed(*_finish(text, calls, [*spans, (at, len(text))]), truncated=True)
    if calls:
        return Parsed(*_finish(text, calls, spans))
    whole = text.strip()
    fenced = _WHOLE_FENCE.match(whole)
    if fenced:
        whole = fenced.group(1).strip()
    if whole[:1] in ("{", "["):
        try:
            obj = json.loads(whole)
        except (json.JSONDecodeError, ValueError):
            obj = None
        objs = obj if isinstance(obj, list) else [obj]
        found = [_as_call(o, names, strict=True) for o in objs] if obj is not None else []
        if found and all(found):
            return Parsed(_openai(found), None)
    return Parsed([], text if text else None)


def _finish(text: str, calls: list[dict], spans: list[tuple[int, int]]) -> tuple[list[dict], str | None]:
    """The calls in OpenAI's shape, and the text outside their spans as content."""
    rest, last = [], 0
    for a, b in spans:
        rest.append(text[last:a])
        last = b
    rest.append(text[last:])
    return _openai(calls), _tidy("".join(rest))


class ToolStream:
    """Streaming with tools offered: text goes out as it comes until a call may be starting (a start marker,
    or a response whose first character opens JSON or a code fence); from there the rest is buffered and
    parsed at the end. A partial marker at the end of the text is held back until it resolves."""

    def __init__(self, tool_names: list[str] | None = None):
        self.names = tool_names
        self.pending = ""
        self.buffering = False
        self.sent_any = False

    def feed(self, delta: str) -> str:
        self.pending += delta
        if self.buffering:
            return ""
        if not self.sent_any:
            head = self.pending.lstrip()
            if not head:
                return ""
            if head[0] in "{[`":
                self.buffering = True
                return ""
        hits = [i for i in (self.pending.find(m) for m in START_MARKERS) if i >= 0]
        if hits:
            cut = min(hits)
            out, self.pending = self.pending[:cut], self.pending[cut:]
            self.buffering = True
            return self._sent(out)
        keep = partial_marker_length(self.pending, START_MARKERS)
        out = self.pending[: len(self.pending) - keep]
        self.pending = self.pending[len(self.pending) - keep :]
        return self._sent(out)

    def _sent(self, out: str) -> str:
        if out:
            self.sent_any = True
        return out

    def finish(self, truncated: bool = False) -> Parsed:
        """The calls in the buffered text and the content not yet sent (`truncated`: the generation ended at
        the token limit, see `parse`)."""
        text, self.pending = self.pending, ""
        if not text:
            return Parsed([], None)
        if not self.buffering:
            return Parsed([], text)
        return parse(text, self.names, truncated)
