"""Tool calls, stop strings, keep-alives, mid-stream errors and client disconnects on /v1/chat/completions.

The demo model can't decide to call a tool, so the model here is scripted: a module whose logits put all
the mass on the next token of a fixed script, chosen by `script=<name>` in the last user message. Everything
after the model is the real code: blink.generate.chat_engine.ChatEngine's decode loop (sampling, detokenization, stop
strings), the real app (blink.server.build_context / create_app) on uvicorn on loopback, the real `openai`
SDK and raw HTTP.
"""

from __future__ import annotations

import dataclasses
import json
import time
from types import SimpleNamespace

import httpx
import openai
import pytest

from helpers import Served
from helpers.scripted import FORMATS, SCRIPTS, TOOLS, ScriptedModel, ask, scripted_context

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def scripted(demo_dir):
    from blink.server import create_app
    from blink.web.auth import ApiKey

    scripted = scripted_context(demo_dir, "blink-scripted")
    open_server = Served(create_app(scripted.ctx))
    keyed = Served(create_app(dataclasses.replace(scripted.ctx, auth=ApiKey("sekret-key-123"))))
    yield SimpleNamespace(**vars(scripted), url=open_server.url, keyed_url=keyed.url)
    open_server.stop()
    keyed.stop()


@pytest.fixture(scope="module")
def client(scripted):
    return openai.OpenAI(base_url=scripted.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def collect_stream(stream):
    content, calls, finishes, chunks = "", {}, [], 0
    for chunk in stream:
        chunks += 1
        for choice in chunk.choices:
            delta = choice.delta
            content += delta.content or ""
            for call in delta.tool_calls or []:
                assert call.index is not None  # Open WebUI drops calls without an index
                slot = calls.setdefault(call.index, {"id": call.id, "name": "", "arguments": ""})
                slot["name"] += call.function.name or ""
                slot["arguments"] += call.function.arguments or ""
            if choice.finish_reason:
                finishes.append(choice.finish_reason)
    return content, [calls[i] for i in sorted(calls)], finishes


@pytest.mark.parametrize("name", FORMATS)
def test_tool_call_formats_non_streamed(client, name):
    out = client.chat.completions.create(model="blink-scripted", messages=ask(name), tools=TOOLS)
    choice = out.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}


@pytest.mark.parametrize("name", FORMATS)
def test_tool_call_formats_streamed(client, name):
    stream = client.chat.completions.create(model="blink-scripted", messages=ask(name), tools=TOOLS, stream=True)
    content, calls, finishes = collect_stream(stream)
    assert finishes == ["tool_calls"]
    assert content == ""  # no raw markup leaked as text
    assert [c["name"] for c in calls] == ["get_weather"]
    assert json.loads(calls[0]["arguments"]) == {"city": "Paris"}


def test_text_then_two_calls_streamed_and_not(client):
    out = client.chat.completions.create(model="blink-scripted", messages=ask("tagged2"), tools=TOOLS)
    msg = out.choices[0].message
    assert out.choices[0].finish_reason == "tool_calls"
    assert msg.content == "I will look both up."
    assert [(c.function.name, json.loads(c.function.arguments)) for c in msg.tool_calls] == [
        ("get_weather", {"city": "Oslo"}),
        ("search", {"q": "Oslo events"}),
    ]
    stream = client.chat.completions.create(model="blink-scripted", messages=ask("tagged2"), tools=TOOLS, stream=True)
    content, calls, finishes = collect_stream(stream)
    assert content.strip() == "I will look both up." and finishes == ["tool_calls"]
    assert [c["name"] for c in calls] == ["get_weather", "search"]


def test_prose_mentioning_json_is_not_a_call(client):
    out = client.chat.completions.create(model="blink-scripted", messages=ask("prose"), tools=TOOLS)
    assert out.choices[0].finish_reason == "stop"
    assert out.choices[0].message.tool_calls is None
    assert out.choices[0].message.content == SCRIPTS["prose"]
    content, calls, finishes = collect_stream(
        client.chat.completions.create(model="blink-scripted", messages=ask("prose"), tools=TOOLS, stream=True)
    )
    assert content == SCRIPTS["prose"] and calls == [] and finishes == ["stop"]


def test_without_tools_call_markup_is_plain_text(client):
    out = client.chat.completions.create(model="blink-scripted", messages=ask("tagged"))
    assert out.choices[0].finish_reason == "stop" and out.choices[0].message.content == SCRIPTS["tagged"]
    out = client.chat.completions.create(
        model="blink-scripted", messages=ask("tagged"), tools=TOOLS, tool_choice="none"
    )
    assert out.choices[0].message.tool_calls is None


def test_plain_text_with_tools_streams_in_several_chunks(client):
    stream = client.chat.completions.create(model="blink-scripted", messages=ask("plain"), tools=TOOLS, stream=True)
    pieces = [c.choices[0].delta.content for c in stream if c.choices and c.choices[0].delta.content]
    assert len(pieces) > 5 and "".join(pieces) == SCRIPTS["plain"]


def test_tool_round_trip_history_is_accepted(client):
    messages = ask("plain") + [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "18C, sunny"},
        {"role": "user", "content": "And so? script=plain"},
    ]
    out = client.chat.completions.create(model="blink-scripted", messages=messages, tools=TOOLS)
    assert out.choices[0].message.content == SCRIPTS["plain"]


def test_stop_strings_end_generation_and_are_not_sent(client):
    out = client.chat.completions.create(model="blink-scripted", messages=ask("stopper"), stop=["STOP", "zzz"])
    assert out.choices[0].message.content == "alpha beta " and out.choices[0].finish_reason == "stop"
    stream = client.chat.completions.create(model="blink-scripted", messages=ask("stopper"), stop="P ga", stream=True)
    content, _, finishes = collect_stream(stream)
    assert content == "alpha beta STO"  # a stop string across token boundaries, held back then dropped
    assert finishes == ["stop"]


def test_keep_alive_comments_while_waiting_for_the_first_token(scripted, monkeypatch):
    monkeypatch.setattr(scripted.ctx.chats, "keepalive_s", 0.25)
    body = {"model": "x", "messages": ask("slow"), "stream": True, "stream_options": {"include_usage": True}}
    lines = []
    with httpx.stream("POST", scripted.url + "/v1/chat/completions", json=body, timeout=30) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line:
                lines.append(line)
    first = json.loads(lines[0].removeprefix("data: "))
    assert first["choices"][0]["delta"]["role"] == "assistant"
    first_content = next(i for i, ln in enumerate(lines) if '"content":"' in ln and '"content":""' not in ln)
    assert any(ln == ": keep-alive" for ln in lines[1:first_content])
    assert lines[-1] == "data: [DONE]"
    usage = json.loads(lines[-2].removeprefix("data: "))
    assert usage["choices"] == []
    assert usage["usage"]["completion_tokens"] == len(scripted.tokenizer.encode("finally here"))


def test_error_mid_stream_is_an_sse_error_then_done(scripted, client):
    with httpx.stream(
        "POST",
        scripted.url + "/v1/chat/completions",
        timeout=30,
        json={"model": "x", "messages": ask("boom"), "stream": True},
    ) as r:
        lines = [ln for ln in r.iter_lines() if ln]
    assert lines[-1] == "data: [DONE]"
    error = json.loads(lines[-2].removeprefix("data: "))["error"]
    assert "accelerator caught fire" in error["message"] and error["type"] == "internal_error"
    with pytest.raises(openai.APIError) as info:
        for _ in client.chat.completions.create(model="x", messages=ask("boom"), stream=True):
            pass
    assert "accelerator caught fire" in info.value.message
    # and the server keeps serving
    assert client.chat.completions.create(model="x", messages=ask("plain")).choices[0].message.content


def test_disconnect_mid_stream_stops_generation(scripted):
    """The client reads a few chunks of an endless generation and hangs up: generation must stop within a
    few tokens (counted at the model)."""
    model = scripted.model
    body = {"model": "x", "messages": ask("forever"), "stream": True, "max_tokens": 3000}
    with httpx.stream("POST", scripted.url + "/v1/chat/completions", json=body, timeout=30) as r:
        seen = 0
        for line in r.iter_lines():
            if '"content":" tick' in line:
                seen += 1
                if seen == 10:
                    break
        at_disconnect = model.forwards
    time.sleep(1.0)  # 50 tokens' worth of time at 20 ms a token
    after = model.forwards
    time.sleep(0.5)
    assert model.forwards == after, "generation still running after the client left"
    assert after - at_disconnect <= 5, f"{after - at_disconnect} tokens generated after the disconnect"


def test_disconnect_non_streamed_stops_generation(scripted):
    model = scripted.model
    body = {"model": "x", "messages": ask("forever"), "max_tokens": 3000}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(scripted.url + "/v1/chat/completions", json=body, timeout=0.8)
    at_disconnect = model.forwards
    time.sleep(2.0)  # the route checks for a vanished client about once a second
    after = model.forwards
    time.sleep(0.5)
    assert model.forwards == after, "generation still running after the client left"
    assert after - at_disconnect <= 5, f"{after - at_disconnect} tokens generated after the disconnect"


def test_api_key_on_openai_routes(scripted):
    bad = openai.OpenAI(base_url=scripted.keyed_url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as info:
        bad.chat.completions.create(model="x", messages=ask("plain"))
    assert "API key" in info.value.message and info.value.code == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        bad.decisions.create(model="x", input="hi", questions=[{"type": "predicate", "instructions": "Is it?"}])
    good = openai.OpenAI(base_url=scripted.keyed_url + "/v1", api_key="sekret-key-123", max_retries=0)
    assert good.chat.completions.create(model="x", messages=ask("plain")).choices[0].message.content


def test_stream_left_before_its_first_chunk_gives_its_slot_back(scripted):
    """A client that sends a streamed chat and hangs up before reading anything: its slot comes back (one
    slot here, so a leak would refuse every later chat with 529)."""
    import socket

    from blink.backend import LocalBackend
    from blink.generate.chat_engine import ChatEngine
    from blink.generate.service import ChatService
    from blink.model.loading import Loaded
    from blink.server import create_app
    from blink.web.admission import Admission

    model = ScriptedModel(scripted.ctx.chats.engine.model.config, scripted.tokenizer)
    engine = ChatEngine(Loaded(model, scripted.tokenizer, None))
    ctx = dataclasses.replace(
        scripted.ctx,
        chats=ChatService(engine, LocalBackend(scripted.ctx.planner, engine)),
        admission=Admission.standard(max_chats=1),
    )
    served = Served(create_app(ctx))
    try:
        body = json.dumps({"model": "x", "messages": ask("slow"), "stream": True}).encode()
        head = (
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        for wait in (0.0, 0.02, 0.1, 0.3):
            with socket.create_connection(("127.0.0.1", served.port)) as s:
                s.sendall(head + body)
                time.sleep(wait)
        deadline = time.time() + 10
        while httpx.get(served.url + "/healthz").json()["chat_slots"]["running"] and time.time() < deadline:
            time.sleep(0.05)
        assert httpx.get(served.url + "/healthz").json()["chat_slots"] == {"max_concurrent": 1, "running": 0}
        out = openai.OpenAI(base_url=served.url + "/v1", api_key="x", max_retries=0).chat.completions.create(
            model="x", messages=ask("plain")
        )
        assert out.choices[0].message.content == SCRIPTS["plain"]
    finally:
        served.stop()
