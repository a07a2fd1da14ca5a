"""Structured outputs, forced tool calls and logprobs through the OpenAI wire, with real clients (the openai SDK's
`chat.completions.parse`, langchain-openai's default `with_structured_output`) against the standalone server
running the random-weight demo model: it answers schema-valid JSON and valid calls only because the decode loop
is constrained (blink.generate.structured), so each passing check here is the constraint at work. Schemas bound their
strings (`maxLength`): the random model's strings would otherwise run to the token budget.
"""

from __future__ import annotations

import json
import math
from typing import Literal

import httpx
import openai
import pytest
from pydantic import BaseModel, Field

pytestmark = pytest.mark.e2e


class Ticket(BaseModel):
    title: str = Field(max_length=12)
    urgent: bool
    team: Literal["billing", "returns", "shipping"]
    score: int = Field(ge=1, le=5)


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 10}, "unit": {"type": "string", "enum": ["c", "f"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Time in a zone",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}},
            "required": ["zone"],
            "additionalProperties": False,
        },
    },
}
ASK = [{"role": "user", "content": "File a ticket: my parcel arrived crushed."}]


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server + "/v1", api_key="anything", max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def name(server):
    return httpx.get(server + "/healthz", timeout=30).json()["served_model_name"]


def test_chat_completions_parse_with_a_pydantic_model(client, name):
    out = client.chat.completions.parse(model=name, messages=ASK, response_format=Ticket, max_tokens=200, temperature=0)
    message = out.choices[0].message
    assert out.choices[0].finish_reason == "stop"
    assert isinstance(message.parsed, Ticket) and Ticket.model_validate_json(message.content) == message.parsed


def test_json_object_streamed(client, name):
    text = "".join(
        c.choices[0].delta.content or ""
        for c in client.chat.completions.create(
            model=name, messages=ASK, response_format={"type": "json_object"}, max_tokens=300, seed=2, stream=True
        )
    )
    assert isinstance(json.loads(text), dict)


def test_tool_choice_required_is_a_valid_call(client, name):
    out = client.chat.completions.create(
        model=name, messages=ASK, tools=[WEATHER, TIME], tool_choice="required", max_tokens=200, temperature=0
    )
    choice = out.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls
    for call in choice.message.tool_calls:
        args = json.loads(call.function.arguments)
        if call.function.name == "get_weather":
            assert set(args) == {"city", "unit"} and len(args["city"]) <= 10 and args["unit"] in ("c", "f")
        else:
            assert call.function.name == "get_time" and args["zone"] in ("UTC", "CET")


@pytest.mark.parametrize("stream", [False, True])
def test_named_tool_without_parallel_calls_is_one_call(client, name, stream):
    kwargs = dict(
        model=name,
        messages=ASK,
        tools=[WEATHER, TIME],
        max_tokens=200,
        temperature=0,
        tool_choice={"type": "function", "function": {"name": "get_time"}},
        parallel_tool_calls=False,
    )
    if stream:
        calls = [
            c
            for chunk in client.chat.completions.create(**kwargs, stream=True)
            for c in (chunk.choices[0].delta.tool_calls or [])
        ]
    else:
        calls = client.chat.completions.create(**kwargs).choices[0].message.tool_calls
    assert [c.function.name for c in calls] == ["get_time"]
    assert json.loads(calls[0].function.arguments)["zone"] in ("UTC", "CET")


def test_unenforceable_schema_is_a_400_naming_the_keyword(client, name):
    schema = {
        "type": "object",
        "properties": {"tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}},
    }
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model=name,
            messages=ASK,
            response_format={"type": "json_schema", "json_schema": {"name": "t", "schema": schema, "strict": True}},
        )
    assert "uniqueItems" in caught.value.body["message"]
    assert caught.value.body["param"].startswith("response_format.json_schema.schema")


def test_logprobs_non_streamed_and_streamed_agree(client, name):
    kwargs = dict(model=name, messages=ASK, max_tokens=6, temperature=0, logprobs=True, top_logprobs=3)
    whole = client.chat.completions.create(**kwargs).choices[0]
    entries = whole.logprobs.content
    assert len(entries) == 6 and "".join(e.token for e in entries) == whole.message.content
    for e in entries:
        assert e.logprob <= 0 and len(e.top_logprobs) == 3
        assert e.top_logprobs[0].logprob == pytest.approx(e.logprob, abs=1e-5)  # greedy: the top token is drawn
        assert sum(math.exp(t.logprob) for t in e.top_logprobs) <= 1 + 1e-4
    streamed = [
        e
        for chunk in client.chat.completions.create(**kwargs, stream=True)
        if chunk.choices and chunk.choices[0].logprobs
        for e in chunk.choices[0].logprobs.content
    ]
    # two requests: the same tokens, each logprob within 1e-5 (rounding both to 4 places could split a pair)
    assert [e.token for e in streamed] == [e.token for e in entries]
    assert all(abs(s.logprob - e.logprob) <= 1e-5 for s, e in zip(streamed, entries))


@pytest.mark.parametrize(
    "kwargs,param",
    [
        ({"top_logprobs": 21, "logprobs": True}, "top_logprobs"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"tool_choice": "required"}, "tool_choice"),
    ],
)
def test_logprob_and_tool_choice_bounds(server, name, kwargs, param):
    r = httpx.post(server + "/v1/chat/completions", json={"model": name, "messages": ASK, **kwargs}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == param


def test_responses_text_format_and_logprobs(client, name):
    out = client.responses.create(
        model=name,
        input=ASK[0]["content"],
        max_output_tokens=200,
        temperature=0,
        text={
            "format": {
                "type": "json_schema",
                "name": "ticket",
                "strict": True,
                "schema": {**Ticket.model_json_schema(), "additionalProperties": False},
            }
        },
        include=["message.output_text.logprobs"],
        top_logprobs=2,
    )
    assert out.status == "completed"
    Ticket.model_validate_json(out.output_text)
    part = out.output[0].content[0]
    assert "".join(e.token for e in part.logprobs) == out.output_text
    # under a grammar the alternatives are the tokens it allows: as many as asked, or fewer where fewer are allowed
    assert all(1 <= len(e.top_logprobs) <= 2 and e.top_logprobs[0].logprob >= e.logprob - 1e-5 for e in part.logprobs)
    assert any(len(e.top_logprobs) == 2 for e in part.logprobs)


def test_responses_parse_with_a_pydantic_model(client, name):
    out = client.responses.parse(
        model=name, input=ASK[0]["content"], text_format=Ticket, max_output_tokens=200, temperature=0
    )
    assert isinstance(out.output_parsed, Ticket)


def test_completions_legacy_logprobs(client, name):
    out = client.completions.create(model=name, prompt="Once upon a time", max_tokens=5, temperature=0, logprobs=2)
    lp = out.choices[0].logprobs
    assert len(lp.tokens) == 5 and "".join(lp.tokens) == out.choices[0].text
    assert all(len(alternatives) == 2 for alternatives in lp.top_logprobs)
    assert lp.text_offset[0] == 0 and all(v <= 0 for v in lp.token_logprobs)


def test_langchain_default_with_structured_output(server, name):
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(
        model=name, base_url=server + "/v1", api_key="anything", temperature=0, max_tokens=200, max_retries=0
    )
    ticket = llm.with_structured_output(Ticket).invoke("File a ticket: my parcel arrived crushed.")
    assert isinstance(ticket, Ticket)
