"""Reasoning and the Responses wire's items, on a server that thinks (`enable_thinking`), with outputs scripted
(the demo model can't decide to think or to call a tool): the scripted model (ci/tests/helpers/scripted.py) writes
`<think>…</think>` and tool calls; everything after it is the real code (blink.generate.chat_engine's decode loop,
the real app on uvicorn on loopback) read by the real `openai` SDK and pydantic-ai's `openai:` shorthand (Responses).
"""

from __future__ import annotations

import httpx
import openai
import pytest

from helpers import Served
from helpers.scripted import TOOLS, ask, scripted_context

pytestmark = pytest.mark.e2e

REASONING = "The user asks about Paris.\nIt is mild there."
ANSWER = "The weather in Paris is mild."
RESPONSE_TOOLS = [{"type": "function", **t["function"]} for t in TOOLS]


@pytest.fixture(scope="module")
def thinking(demo_dir):
    from blink.server import create_app

    served = Served(create_app(scripted_context(demo_dir, "blink-thinks", enable_thinking=True).ctx))
    yield served.url
    served.stop()


@pytest.fixture(scope="module")
def client(thinking):
    return openai.OpenAI(base_url=thinking + "/v1", api_key="unused", max_retries=0, timeout=60)


def test_chat_reasoning_content_non_streamed(client):
    message = client.chat.completions.create(model="m", messages=ask("think")).choices[0].message
    assert message.content == ANSWER
    assert message.model_extra["reasoning_content"] == REASONING


def test_chat_reasoning_content_streamed(client):
    reasoning = content = ""
    for chunk in client.chat.completions.create(model="m", messages=ask("think"), stream=True):
        delta = chunk.choices[0].delta
        reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
        content += delta.content or ""
    assert (reasoning, content) == (REASONING, ANSWER)


def test_chat_reasoning_then_a_tool_call(client):
    out = client.chat.completions.create(model="m", messages=ask("thinkcall"), tools=TOOLS)
    choice = out.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    assert choice.message.model_extra["reasoning_content"] == "I should look it up."
    assert choice.message.tool_calls[0].function.name == "get_weather"


def test_chat_without_a_think_block_is_all_content(client):
    message = client.chat.completions.create(model="m", messages=ask("plain")).choices[0].message
    assert message.content.startswith("The weather in Paris") and message.model_extra["reasoning_content"] is None


def test_responses_reasoning_item_and_usage(client):
    out = client.responses.create(model="m", input=ask("think")[0]["content"])
    assert out.status == "completed"
    reasoning, message = out.output
    assert reasoning.type == "reasoning" and reasoning.content[0].text == REASONING
    assert message.type == "message" and out.output_text == ANSWER
    assert 0 < out.usage.output_tokens_details.reasoning_tokens < out.usage.output_tokens


def test_responses_stream_helper_gets_the_same_response(client):
    with client.responses.stream(model="m", input=ask("think")[0]["content"]) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert final.output_text == ANSWER and final.output[0].content[0].text == REASONING
    assert "response.reasoning_text.delta" in kinds and kinds[-1] == "response.completed"
    assert kinds.index("response.reasoning_text.done") < kinds.index("response.output_text.delta")


@pytest.mark.parametrize("stream", [False, True])
def test_responses_function_calls(client, stream):
    kwargs = dict(model="m", input=ask("tagged2")[0]["content"], tools=RESPONSE_TOOLS)
    if stream:
        with client.responses.stream(**kwargs) as events:
            kinds = [event.type for event in events]
            out = events.get_final_response()
        assert kinds.count("response.function_call_arguments.done") == 2
    else:
        out = client.responses.create(**kwargs)
    message, first, second = out.output
    assert message.type == "message" and out.output_text.startswith("I will look both up.")
    assert [first.type, second.type] == ["function_call", "function_call"]
    assert (first.name, second.name) == ("get_weather", "search")
    assert first.arguments == '{"city": "Oslo"}' and first.call_id.startswith("call_")
    assert out.status == "completed"


def test_responses_tool_round_trip_input(client):
    out = client.responses.create(
        model="m",
        tools=RESPONSE_TOOLS,
        input=[
            {"role": "user", "content": "Weather in Paris?"},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny, 21C"},
            {"role": "user", "content": "So? script=plain"},
        ],
    )
    assert out.output_text.startswith("The weather in Paris")


def test_responses_tool_choice_none_turns_tools_off(client):
    out = client.responses.create(
        model="m", input=ask("tagged")[0]["content"], tools=RESPONSE_TOOLS, tool_choice="none"
    )
    assert [item.type for item in out.output] == ["message"] and "<tool_call>" in out.output_text


def test_pydantic_ai_openai_shorthand(thinking, monkeypatch):
    from pydantic_ai import Agent

    monkeypatch.setenv("OPENAI_BASE_URL", thinking + "/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    result = Agent("openai:blink-thinks").run_sync(ask("think")[0]["content"])
    assert result.output == ANSWER


def test_responses_through_raw_http_say_store_false(thinking):
    body = httpx.post(
        thinking + "/v1/responses", json={"model": "m", "input": "hi script=plain", "store": True}, timeout=60
    ).json()
    assert body["store"] is False and body["object"] == "response"
