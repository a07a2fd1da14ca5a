"""The request pipeline's order, on a real `python -m blink serve --model demo` on loopback: body (no place held)
-> check (at once, whatever the load) -> admit -> capped count -> work, the same on every route.

- a few KB that decode past the context window are refused on every text route in bounded memory (the count is
  capped, never the whole prompt tokenized: the figures per route are bench/stress/hostile.py's);
- clients that stall or trickle their bodies hold no decision place: a normal decision is answered meanwhile;
- with every chat slot taken, a request the server will refuse is refused at once, not after the slot wait.
"""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest
import zstandard

from helpers import MB, ServerProcess, blink_serve, running, text_of, watching

pytestmark = pytest.mark.e2e

QUESTION = {"type": "noul", "instructions": "Is this about the weather?"}
SLOT_WAIT_S = 20


@pytest.fixture(scope="module")
def small(demo_root, demo_dir):
    """16 decision places (8 queued + 8 in the batch), one chat slot that a waiting request waits 20 s for."""
    argv = blink_serve(
        "--max-queued-requests",
        "8",
        "--max-batch-requests",
        "8",
        "--max-concurrent-chats",
        "1",
        "--chat-slot-wait-s",
        str(SLOT_WAIT_S),
    )
    argv[argv.index("demo")] = str(demo_dir)
    with running(argv, demo_root, name="serve-pipeline") as url:
        yield ServerProcess(url)


def zstd(body: dict) -> bytes:
    return zstandard.ZstdCompressor(level=19).compress(json.dumps(body).encode())


PAST_THE_CONTEXT = text_of(12 * MB)  # ~2.6M tokens against a 32k window
ROUTES = {
    "/v1/systemone": {"state": PAST_THE_CONTEXT, "questions": {"q": QUESTION}},
    "/v1/decisions": {
        "model": "demo",
        "input": PAST_THE_CONTEXT,
        "questions": [{"type": "predicate", "instructions": "Is it about the weather?"}],
    },
    "/v1/chat/completions": {
        "model": "demo",
        "max_tokens": 2,
        "messages": [{"role": "user", "content": PAST_THE_CONTEXT}],
    },
    "/v1/responses": {"model": "demo", "max_output_tokens": 2, "input": PAST_THE_CONTEXT},
    "/v1/completions": {"model": "demo", "max_tokens": 2, "prompt": PAST_THE_CONTEXT},
}


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_a_few_kb_that_decode_past_the_context_are_refused_in_bounded_memory(small, route):
    packed = zstd(ROUTES[route])
    assert len(packed) < 8 * 1024
    watch = watching(small)
    try:
        r = httpx.post(
            small.url + route,
            content=packed,
            headers={"content-type": "application/json", "content-encoding": "zstd"},
            timeout=30,
        )
    finally:
        health_max, peak, kept = watch.done()
    assert 400 <= r.status_code < 500, r.text[:300]
    assert "context" in r.text, r.text[:300]  # refused for its length, not for something else
    assert peak < 150 * MB and kept < 100 * MB, (route, peak / MB, kept / MB)


def test_a_tool_call_past_the_context_is_refused_over_mcp_in_bounded_memory(small):
    """MCP clients send plain JSON, and the MCP SDK refuses a body over 4 MB (413) itself: a 3 MB state, ~650k
    tokens against the 32k window, is refused by the capped count as a tool error."""
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "decide", "arguments": {"state": text_of(3 * MB), "questions": {"q": QUESTION}}},
    }
    watch = watching(small)
    try:
        r = httpx.post(
            small.url + "/mcp",
            json=call,
            headers={"accept": "application/json, text/event-stream"},
            timeout=60,
        )
    finally:
        _, peak, kept = watch.done()
    assert r.status_code == 200, r.text[:300]  # MCP answers a refused call as a tool error
    result = r.json()["result"]
    assert result["isError"] and "context" in result["content"][0]["text"], result
    assert peak < 150 * MB and kept < 100 * MB, (peak / MB, kept / MB)


async def _stall(port: int, declared: int, sent: int, trickle: bool, stop: asyncio.Event) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = (
        f"POST /v1/systemone HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        f"content-length: {declared}\r\n\r\n"
    )
    writer.write(head.encode() + b'{"state": "' + b"a" * sent)
    await writer.drain()
    while trickle and not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), 2.0)
        except TimeoutError:
            writer.write(b"a")
            await writer.drain()
    await stop.wait()
    writer.close()


async def _decide_while_stalled(url: str, port: int) -> tuple[int, float]:
    stop = asyncio.Event()
    stalled = [asyncio.create_task(_stall(port, 100_000, 500, False, stop)) for _ in range(50)]
    trickling = [asyncio.create_task(_stall(port, 100_000, 10, True, stop)) for _ in range(40)]
    await asyncio.sleep(1.5)  # every stalled body is in, none will finish
    try:
        async with httpx.AsyncClient(timeout=30) as client:
            t = time.perf_counter()
            r = await client.post(url + "/v1/systemone", json={"state": "fine", "questions": {"q": QUESTION}})
            return r.status_code, time.perf_counter() - t
    finally:
        stop.set()
        await asyncio.gather(*stalled, *trickling, return_exceptions=True)


def test_stalled_and_trickling_bodies_hold_no_decision_place(small):
    status, took = asyncio.run(_decide_while_stalled(small.url, small.port))
    assert status == 200, status  # 90 bodies in flight against 16 decision places
    assert took < 8, took  # answered as it would be alone, not after the bodies' 10 s deadline


def test_with_every_chat_slot_taken_a_refused_request_is_refused_at_once(small):
    """One slot, held by a long stream; requests refused by their check get their 4xx at once on every OpenAI
    route, where a valid one waits for the slot."""
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    refused = {
        "/v1/chat/completions": {
            "model": "demo",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "What is it?"}, image]}],
        },
        "/v1/responses": {
            "model": "demo",
            "input": [
                {
                    "role": "user",
                    "content": [{"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}],
                }
            ],
        },
        "/v1/completions": {"model": "demo", "prompt": "Once upon", "n": 2},
    }
    # plain text from the random model, seeded: it runs to its 3000-token limit (about a minute here), holding the
    # slot for the whole test. (A forced tool call did not: its string argument closes whenever a quote is drawn.)
    holding = {
        "model": "demo",
        "max_tokens": 3000,
        "stream": True,
        "seed": 7,
        "messages": [{"role": "user", "content": "Tell me a long story."}],
    }
    with (
        httpx.Client(timeout=120) as client,
        client.stream("POST", small.url + "/v1/chat/completions", json=holding) as s,
    ):
        assert s.status_code == 200
        lines = s.iter_lines()
        while '"content":""' in (line := next(lines)) or not line.startswith("data: "):
            pass  # the role chunk goes out before the slot is taken; the first text comes from the slot's holder
        assert '"finish_reason":null' in line, line
        slots = client.get(small.url + "/healthz").json()["chat_slots"]
        assert slots == {"max_concurrent": 1, "running": 1}, slots
        for route, body in refused.items():
            t = time.perf_counter()
            r = client.post(small.url + route, json=body)
            took = time.perf_counter() - t
            assert r.status_code == 400, (route, r.status_code, r.text[:300])
            assert r.json()["error"]["type"] == "invalid_request_error"
            assert took < SLOT_WAIT_S / 2, (route, took)
