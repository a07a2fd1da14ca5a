"""Tool-call parsing (blink.generate.toolcalls): every format models emit, and what is NOT a call."""

from __future__ import annotations

import json

import pytest

from blink.generate.toolcalls import ToolStream, parse

TOOLS = ["get_weather", "search"]


def args(call) -> dict:
    return json.loads(call["function"]["arguments"])


def names(parsed) -> list[str]:
    return [c["function"]["name"] for c in parsed.calls]


def test_tagged_json_single_and_multiple():
    text = (
        'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>{"name": "search", "arguments": {"q": "rain"}}</tool_call>'
    )
    parsed = parse(text, TOOLS)
    assert names(parsed) == ["get_weather", "search"]
    assert [c["index"] for c in parsed.calls] == [0, 1]
    assert args(parsed.calls[0]) == {"city": "Paris"}
    assert all(c["id"].startswith("call_") and c["type"] == "function" for c in parsed.calls)
    assert parsed.content == "Let me check."


def test_tagged_json_only_call_has_null_content():
    parsed = parse('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>', TOOLS)
    assert names(parsed) == ["get_weather"] and parsed.content is None


def test_tagged_unclosed_at_end_of_generation():
    parsed = parse('<tool_call>{"name": "search", "arguments": {"q": "x"}}', TOOLS)
    assert names(parsed) == ["search"] and args(parsed.calls[0]) == {"q": "x"}


def test_xml_function_parameter_form_typed_values():
    text = (
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        '<parameter=days>\n3\n</parameter>\n<parameter=opts>\n{"metric": true}\n</parameter>\n</function>\n'
        "</tool_call>"
    )
    parsed = parse(text, TOOLS)
    assert names(parsed) == ["get_weather"]
    assert args(parsed.calls[0]) == {"city": "Paris", "days": 3, "opts": {"metric": True}}
    assert parsed.content is None


def test_xml_function_form_without_wrapper_inside_xml_fence():
    text = "```xml\n<function=search>\n<parameter=q>\nbest pizza\n</parameter>\n</function>\n```"
    parsed = parse(text, TOOLS)
    assert names(parsed) == ["search"] and args(parsed.calls[0]) == {"q": "best pizza"}
    assert parsed.content is None  # the fence left empty is not content


@pytest.mark.parametrize("wrapper", ["tool_call", "function_call", "functioncall"])
def test_xml_name_arguments_form(wrapper):
    text = f'<{wrapper}><name>get_weather</name><arguments>{{"city": "Rome"}}</arguments></{wrapper}>'
    parsed = parse(text, TOOLS)
    assert names(parsed) == ["get_weather"] and args(parsed.calls[0]) == {"city": "Rome"}


def test_bare_json_whole_response():
    parsed = parse('  {"name": "get_weather", "arguments": {"city": "Lima"}}\n', TOOLS)
    assert names(parsed) == ["get_weather"] and parsed.content is None
    parsed = parse('{"name": "search", "parameters": {"q": "y"}}', TOOLS)  # Llama's key
    assert args(parsed.calls[0]) == {"q": "y"}


def test_bare_json_list_of_calls():
    parsed = parse('[{"name": "search", "arguments": {"q": "a"}}, {"name": "get_weather", "arguments": {}}]', TOOLS)
    assert names(parsed) == ["search", "get_weather"] and [c["index"] for c in parsed.calls] == [0, 1]


def test_fenced_json_whole_response():
    parsed = parse('```json\n{"name": "search", "arguments": {"q": "z"}}\n```', TOOLS)
    assert names(parsed) == ["search"] and parsed.content is None


def test_string_arguments_pass_through():
    parsed = parse('<tool_call>{"name": "search", "arguments": "{\\"q\\": \\"s\\"}"}</tool_call>', TOOLS)
    assert parsed.calls[0]["function"]["arguments"] == '{"q": "s"}'


@pytest.mark.parametrize(
    "text",
    [
        'Here is an example call: {"name": "search", "arguments": {"q": "x"}} - use it like that.',
        'The format is:\n```json\n{"name": "search", "arguments": {}}\n```\nas shown.',
        '{"name": "Alice", "age": 30}',  # JSON about a person, not a call
        '{"name": "delete_everything", "arguments": {}}',  # not an offered tool
        '```json\n{"city": "Paris"}\n```',
        "<tool_call>not json at all</tool_call>",
        "Plain answer without any call.",
    ],
)
def test_not_calls(text):
    parsed = parse(text, TOOLS)
    assert parsed.calls == [] and parsed.content == text


def feed_all(stream: ToolStream, pieces: list[str]) -> str:
    return "".join(stream.feed(p) for p in pieces)


def test_stream_plain_text_passes_through():
    s = ToolStream(TOOLS)
    out = feed_all(s, ["Hello", " there", ", how", " are you?"])
    tail = s.finish()
    assert out + (tail.content or "") == "Hello there, how are you?" and tail.calls == []


def test_stream_text_then_tagged_call_never_leaks_markup():
    text = 'Checking now. <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    pieces = [text[i : i + 3] for i in range(0, len(text), 3)]  # markers split across deltas
    s = ToolStream(TOOLS)
    out = feed_all(s, pieces)
    assert "<" not in out and out.startswith("Checking now.")
    tail = s.finish()
    assert [c["function"]["name"] for c in tail.calls] == ["get_weather"]
    assert tail.content is None


def test_stream_bare_json_is_buffered_from_the_start():
    s = ToolStream(TOOLS)
    assert feed_all(s, ["  ", '{"na', 'me": "search", "arguments": {"q": 1}}']) == ""
    tail = s.finish()
    assert [c["function"]["name"] for c in tail.calls] == ["search"]


def test_stream_lookalike_is_flushed_as_content():
    s = ToolStream(TOOLS)
    out = feed_all(s, ["a < b and <tool", "box> is fine"])
    tail = s.finish()
    assert out + (tail.content or "") == "a < b and <toolbox> is fine" and tail.calls == []
