"""The OpenAI wire's parsers in-process, no server process and no app: blink.api.openai.protocol (a chat request's
messages, content and fields, each refusal naming its field, errors rendered as the live API's types) and
blink.api.openai.constraints (response_format, tool_choice, logprobs, and the parameters of chat and Responses)."""

from __future__ import annotations

import pytest

from blink.api.openai import constraints, protocol
from blink.errors import InvalidRequest, NoRoute, Overloaded, PayloadTooLarge, QuotaExceeded, Unauthorized
from blink.plan import GenerationParams


# --- the OpenAI wire's parsers --------------------------------------------------------------------------------------
def refused(fn, *args) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        fn(*args)
    return info.value


def param(error: InvalidRequest) -> str | None:
    return protocol.render(error)[1]["error"]["param"]


def test_parse_chat_reads_messages_content_and_fields():
    request = protocol.parse_chat(
        {
            "model": "m",
            "messages": [
                {"role": "developer", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "one"}, "two", {"type": "refusal"}]},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": '{"x": 1}'}}],
                },
                {"role": "tool", "content": "42", "tool_call_id": "c1"},
            ],
            "max_tokens": 9,
            "max_completion_tokens": 5.0,
            "stream": True,
            "stream_options": {"include_usage": True},
            "temperature": 0,
            "stop": "END",
            "unknown_field": "ignored",
        }
    )
    assert [m["role"] for m in request.messages] == ["system", "user", "assistant", "tool"]
    assert request.messages[1]["content"] == "one\ntwo"
    assert request.messages[2]["tool_calls"][0]["function"] == {"name": "f", "arguments": {"x": 1}}
    assert request.messages[3]["tool_call_id"] == "c1"
    assert (request.max_tokens, request.stream, request.include_usage) == (5, True, True)
    assert request.params == GenerationParams(temperature=0.0, stop=("END",))
    assert request.tools is None and request.parallel_tool_calls is True


def test_parse_chat_keeps_images_as_blocks_and_refuses_a_fetch():
    request = protocol.parse_chat(
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "what is it?"},
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                    ],
                }
            ]
        }
    )
    assert request.messages[0]["content"] == [
        {"type": "text", "text": "what is it?"},
        {"type": "image", "data_base64": "AAAA", "loc": ["messages", 0, "content", 1]},
    ]
    error = refused(
        protocol.parse_chat,
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": "https://x/y.png"}]}]},
    )
    assert error.kind == "invalid_image_url" and param(error) == "messages[0].content[0].image_url"


@pytest.mark.parametrize(
    "body,where",
    [
        ([], None),
        ({"messages": []}, "messages"),
        ({}, "messages"),
        ({"model": 3, "messages": [{"role": "user", "content": "x"}]}, "model"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
        ({"messages": ["hi"]}, "messages[0]"),
        ({"messages": [{"role": "user", "content": 7}]}, "messages[0].content"),
        ({"messages": [{"role": "user", "content": [{"type": {}}]}]}, "messages[0].content[0].type"),
        ({"messages": [{"role": "user", "content": [{"type": "audio"}]}]}, "messages[0].content[0].type"),
        ({"messages": [{"role": "user", "content": [{"type": "text"}]}]}, "messages[0].content[0].text"),
        ({"messages": [{"role": "assistant", "tool_calls": [{}]}]}, "messages[0].tool_calls[0].function"),
        ({"messages": [{"role": "user", "content": "x"}], "n": 2}, "n"),
        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, "max_tokens"),
        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": True}, "max_tokens"),
        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 2.5}, "max_tokens"),
        ({"messages": [{"role": "user", "content": "x"}], "temperature": 2.5}, "temperature"),
        ({"messages": [{"role": "user", "content": "x"}], "top_p": float("nan")}, "top_p"),
        ({"messages": [{"role": "user", "content": "x"}], "stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"messages": [{"role": "user", "content": "x"}], "stop": [1]}, "stop"),
        ({"messages": [{"role": "user", "content": "x"}], "stream": "yes"}, "stream"),
        ({"messages": [{"role": "user", "content": "x"}], "stream_options": []}, "stream_options"),
        ({"messages": [{"role": "user", "content": "x"}], "tools": {}}, "tools"),
        ({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "web"}]}, "tools[0]"),
        ({"messages": [{"role": "user", "content": "x"}], "tools": [{"function": {}}]}, "tools[0].function.name"),
        ({"messages": [{"role": "user", "content": "x"}], "tool_choice": "always"}, "tool_choice"),
    ],
)
def test_parse_chat_refuses_a_bad_field_naming_it(body, where):
    error = refused(protocol.parse_chat, body)
    assert param(error) == where, (error.message, error.loc)
    status, rendered = protocol.render(error)
    assert status == 400 and rendered["error"]["message"] == error.message


def test_tool_choice_none_turns_tools_off_and_parallel_false_is_kept():
    tools = [{"type": "function", "function": {"name": "f"}}]
    base = {"messages": [{"role": "user", "content": "x"}], "tools": tools}
    assert protocol.parse_chat(base).tools == tools
    assert protocol.parse_chat({**base, "tool_choice": "none"}).tools is None
    assert protocol.parse_chat({**base, "parallel_tool_calls": False}).parallel_tool_calls is False


def test_arguments_for_template():
    assert protocol.arguments_for_template('{"a": 1}') == {"a": 1}
    assert protocol.arguments_for_template("[1]") == "[1]"  # a JSON non-object passes through
    assert protocol.arguments_for_template("not json") == "not json"
    assert protocol.arguments_for_template({"a": 1}) == {"a": 1}


def test_render_maps_each_error_to_the_live_apis_type():
    assert protocol.render(InvalidRequest("x", loc=["body", "a", 0]))[0] == 400
    assert protocol.render(Unauthorized("x"))[1]["error"]["code"] == "invalid_api_key"
    assert protocol.render(QuotaExceeded())[1]["error"]["type"] == "rate_limit_error"
    assert protocol.render(Overloaded())[:1] == (529,)
    assert protocol.render(PayloadTooLarge("x"))[1]["error"]["type"] == "invalid_request_error"
    assert protocol.render(NoRoute("x", status=405))[0] == 405
    assert protocol.render(InvalidRequest("x", loc=["body"]))[1]["error"]["param"] is None


# --- constraints ------------------------------------------------------------------------------------------------------
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}}},
    {"type": "function", "function": {"name": "search"}},
]


def test_response_format_shapes():
    assert constraints.response_format(None) is None
    assert constraints.response_format({"type": "text"}, "response_format") is None
    assert constraints.response_format({"type": "json_object"}, "response_format") == {"type": "json_object"}
    nested = {"type": "json_schema", "json_schema": {"name": "n", "schema": SCHEMA, "strict": False}}
    assert constraints.response_format(nested, "response_format") == {
        "type": "json_schema",
        "schema": SCHEMA,
        "strict": False,
    }
    flat = {"type": "json_schema", "name": "n", "schema": SCHEMA}  # Responses' text.format
    assert constraints.response_format(flat, "text", "format")["strict"] is True


@pytest.mark.parametrize(
    "value,where",
    [
        ("json", "response_format"),
        ({"type": "yaml"}, "response_format.type"),
        ({"type": "json_schema", "json_schema": {"name": "n"}}, "response_format.json_schema.schema"),
    ],
)
def test_response_format_refusals_name_the_field(value, where):
    assert param(refused(constraints.response_format, value, "response_format")) == where


def test_tool_constraint_required_named_and_auto():
    assert constraints.tool_constraint(TOOLS, None, None) is None
    assert constraints.tool_constraint(TOOLS, "auto", False) is None
    required = constraints.tool_constraint(TOOLS, "required", None)
    assert required["type"] == "tool_call" and [t["name"] for t in required["tools"]] == ["get_weather", "search"]
    assert required["parallel"] is True
    assert constraints.tool_constraint(TOOLS, "required", False)["parallel"] is False
    named = constraints.tool_constraint(TOOLS, {"type": "function", "function": {"name": "search"}}, None)
    assert [t["name"] for t in named["tools"]] == ["search"]
    flat = constraints.tool_constraint(TOOLS, {"type": "function", "name": "search"}, None)  # Responses' shape
    assert flat == named


@pytest.mark.parametrize(
    "tools,choice,parallel,where",
    [
        (TOOLS, "required", "yes", "parallel_tool_calls"),
        (None, "required", None, "tool_choice"),
        (TOOLS, {"type": "function", "function": {"name": "nope"}}, None, "tool_choice"),
        ([{"type": "function", "function": {"name": "bad name!"}}], "required", None, "tools[0].name"),
    ],
)
def test_tool_constraint_refusals_name_the_field(tools, choice, parallel, where):
    assert param(refused(constraints.tool_constraint, tools, choice, parallel)) == where


def test_logprobs_fields():
    assert constraints.chat_logprobs({}) == {}
    assert constraints.chat_logprobs({"logprobs": True, "top_logprobs": 3}) == {"logprobs": True, "top_logprobs": 3}
    for body, where in (
        ({"logprobs": "yes"}, "logprobs"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({"top_logprobs": 2}, "top_logprobs"),
    ):
        assert param(refused(constraints.chat_logprobs, body)) == where
    assert constraints.legacy_logprobs({"logprobs": 0}) == {"logprobs": True, "top_logprobs": 0}
    assert param(refused(constraints.legacy_logprobs, {"logprobs": 6})) == "logprobs"
    entries = [
        {"token": "ab", "logprob": -0.5, "top_logprobs": [{"token": "ab", "logprob": -0.5}]},
        {"token": "c", "logprob": -1.0},
    ]
    assert constraints.legacy_entries(entries, offset=10) == {
        "tokens": ["ab", "c"],
        "token_logprobs": [-0.5, -1.0],
        "top_logprobs": [{"ab": -0.5}, {}],
        "text_offset": [10, 12],
    }


def test_chat_and_responses_params():
    assert constraints.chat_params({"tool_choice": "required", "response_format": {"type": "json_object"}}, TOOLS)[
        "constraint"
    ]["type"] == ("tool_call")  # a forced call wins over the format
    assert constraints.chat_params({"response_format": {"type": "json_object"}}, None) == {
        "constraint": {"type": "json_object"}
    }
    assert constraints.responses_params({"include": ["message.output_text.logprobs"]}, None) == {
        "logprobs": True,
        "top_logprobs": 0,
    }
    assert constraints.responses_params({"text": {"format": {"type": "json_object"}}, "top_logprobs": 2}, None) == {
        "logprobs": True,
        "top_logprobs": 2,
        "constraint": {"type": "json_object"},
    }
    for body, where in (({"text": "plain"}, "text"), ({"include": "all"}, "include")):
        assert param(refused(constraints.responses_params, body, None)) == where
