"""The hostile cases that are one request each (bench/stress/hostile.py runs them): compressed and oversized bodies,
prompts past the context window, deep JSON, lone surrogates, images of odd shapes and sizes, the largest
requests the default limits accept, and what the log and /healthz give away."""

from __future__ import annotations

import base64
import io
import json
import os
import threading
import time

import httpx
import zstandard
from hostile_harness import MB, QUESTION, SECRET, Watch, text_of, timed_post, wire
from servers import Server


# the cases ------------------------------------------------------------------------------------------------------
def case_zstd_bomb(s: Server, state_mb: int = 24) -> dict:
    body = json.dumps(wire().body(text_of(state_mb * MB))).encode()
    packed = zstandard.ZstdCompressor(level=19).compress(body)
    del body
    w = Watch(s)
    status, secs, text = timed_post(
        s.url, wire().path, content=packed, headers={"content-type": "application/json", "content-encoding": "zstd"}
    )
    return {"status": status, "seconds": round(secs, 2), "sent_bytes": len(packed), **w.done(), "detail": text}


def case_chat_12mb(s: Server) -> dict:
    body = {"model": "demo", "messages": [{"role": "user", "content": text_of(12 * MB)}], "max_tokens": 4}
    w = Watch(s)
    status, secs, text = timed_post(s.url, "/v1/chat/completions", json=body)
    return {"status": status, "seconds": round(secs, 2), **w.done(), "detail": text}


PAST_THE_CONTEXT_MB = 12  # ~2.6M tokens against the 32k window, in a body of a few KB


def past_the_context(route: str) -> dict:
    text = text_of(PAST_THE_CONTEXT_MB * MB)
    q = [{"type": "predicate", "instructions": "Is it about the weather?"}]
    return {
        "/v1/systemone": {"state": text, "questions": {"q": QUESTION}},
        "/v1/decisions": {"model": "demo", "input": text, "questions": q},
        "/v1beta/decisions": {"model": "models/demo", "input": text, "questions": {"q": QUESTION}},
        "/v1/chat/completions": {"model": "demo", "max_tokens": 2, "messages": [{"role": "user", "content": text}]},
        "/v1/responses": {"model": "demo", "max_output_tokens": 2, "input": text},
        "/v1/completions": {"model": "demo", "max_tokens": 2, "prompt": text},
        "/v1/completions (echo, a list)": {
            "model": "demo",
            "echo": True,
            "logprobs": 1,
            "max_tokens": 0,
            "prompt": ["a", text],
        },
        "/tokenize": {"model": "demo", "prompt": text},
        "/v1/moderations": {"model": "demo", "input": text},
        # 32 inputs (the most a request takes), each its own decision past the context: 32 capped counts at most
        "/v1/moderations 32 inputs": {"model": "demo", "input": [text[: len(text) // 32]] * 32},
    }[route]


def case_past_the_context(s: Server, route: str) -> dict:
    """A few KB of zstd that decode to a prompt far past the context window: refused by the capped count."""
    packed = zstandard.ZstdCompressor(level=19).compress(json.dumps(past_the_context(route)).encode())
    w = Watch(s)
    status, secs, text = timed_post(
        s.url,
        route.split(" ")[0],
        content=packed,
        headers={"content-type": "application/json", "content-encoding": "zstd"},
    )
    return {"status": status, "seconds": round(secs, 2), "sent_bytes": len(packed), **w.done(), "detail": text}


def case_mcp_past_the_context(s: Server) -> dict:
    """The same over MCP, whose clients send plain JSON (and whose SDK refuses bodies over 4 MB with 413): a
    `decide` call whose 3 MB state (~650k tokens) is far past the window."""
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "decide", "arguments": {"state": text_of(3 * MB), "questions": {"q": QUESTION}}},
    }
    w = Watch(s)
    status, secs, text = timed_post(s.url, "/mcp", json=call, headers={"accept": "application/json, text/event-stream"})
    return {"status": status, "seconds": round(secs, 2), **w.done(), "detail": text}


def case_nested_json(s: Server, depth: int = 100_000) -> dict:
    content = wire().raw(b"[" * depth + b"]" * depth)
    w = Watch(s)
    status, secs, text = timed_post(s.url, wire().path, content=content, headers={"content-type": "application/json"})
    return {"status": status, "seconds": round(secs, 2), **w.done(0.5), "detail": text}


def case_lone_surrogate(s: Server) -> dict:
    content = wire().raw(b'"hello \\ud800 world"')
    w = Watch(s)
    status, secs, text = timed_post(s.url, wire().path, content=content, headers={"content-type": "application/json"})
    return {"status": status, "seconds": round(secs, 2), **w.done(0.5), "detail": text}


def png(width: int, height: int, noise: bool = False) -> bytes:
    from PIL import Image

    if noise:
        image = Image.frombytes("RGB", (width, height), os.urandom(width * height * 3))
    else:
        image = Image.linear_gradient("L").resize((width, height)).convert("RGB")
    out = io.BytesIO()
    image.save(out, "PNG", optimize=True)
    return out.getvalue()


def image_body(images: list[bytes]) -> dict:
    assets = {
        f"<img{i}>": {"type": "image", "format": "png", "data_base64": base64.b64encode(data).decode()}
        for i, data in enumerate(images)
    }
    return {"state": "Look: " + " ".join(assets), "questions": {"q": QUESTION}, "assets": assets}


def case_aspect_png(s: Server) -> dict:
    body = image_body([png(32, 6500)])
    out = {}
    w = Watch(s)
    for path, payload in (
        ("/v1/systemone", body),
        (
            "/v1/decisions",
            {
                "model": "demo",
                "input": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "input_text", "text": "Look"},
                            {
                                "type": "input_image",
                                "image_url": "data:image/png;base64," + body["assets"]["<img0>"]["data_base64"],
                            },
                        ],
                    }
                ],
                "questions": [{"type": "predicate", "name": "q", "instructions": "weather?"}],
            },
        ),
        (
            "/v1beta/decisions",
            {
                "model": "models/demo",
                "input": [
                    {"type": "text", "text": "Look"},
                    {"type": "image", "mime_type": "image/png", "data": body["assets"]["<img0>"]["data_base64"]},
                ],
                "questions": {"q": {"type": "noul", "instructions": "weather?"}},
            },
        ),
    ):
        status, secs, text = timed_post(s.url, path, json=payload)
        out[path] = (status, round(secs, 2), text)
    statuses = "/".join(str(v[0]) for v in out.values())
    return {
        "status": statuses,
        "seconds": max(v[1] for v in out.values()),
        **w.done(0.5),
        "sent_bytes": len(body["assets"]["<img0>"]["data_base64"]),
        "detail": json.dumps(out)[:300],
    }


def case_png_memory(s: Server, concurrency: int = 8) -> dict:
    # each request: two 20-megapixel PNGs (the largest source the default limits decode), small on the wire
    images = [png(4000, 5000), png(5000, 4000)]
    body = wire().images(images)
    sent = sum(len(i) for i in images) * concurrency
    w = Watch(s)
    t = time.perf_counter()
    with httpx.Client(timeout=300) as client:
        results = list(_threads(concurrency, lambda: client.post(s.url + wire().path, json=body).status_code))
    secs = time.perf_counter() - t
    return {
        "status": "/".join(sorted({str(r) for r in results})),
        "seconds": round(secs, 2),
        "sent_bytes": sent,
        **w.done(),
        "detail": f"{concurrency} concurrent requests of 2 x 20 MP PNGs",
    }


def case_state_at_limit(s: Server, margin: int = 400, questions: int = 4) -> dict:
    """The largest text request the default limits accept: one state `margin` tokens under max_context_tokens
    (32,768; room for the template and the question), `questions` questions (at most max_questions)."""
    from transformers import AutoTokenizer

    from blink.limits import Limits
    from blink.model.demo import demo_model_dir

    tokenizer = AutoTokenizer.from_pretrained(str(demo_model_dir()))
    target = Limits().max_context_tokens - margin
    unit = len(tokenizer(text_of(10_000))["input_ids"]) / 10_000  # tokens per character of this text
    n = int(target / unit)
    while len(tokenizer(text_of(n))["input_ids"]) > target:
        n = int(n * 0.99)
    tokens = len(tokenizer(text_of(n))["input_ids"])
    body = wire().body(text_of(n), {f"q{i}": QUESTION for i in range(questions)})
    w = Watch(s)
    status, secs, text = timed_post(s.url, wire().path, json=body, timeout=600)
    return {"status": status, "seconds": round(secs, 2), **w.done(), "detail": f"{tokens} state tokens; {text}"}


def case_png_one_request(s: Server) -> dict:
    """The largest image request the default limits accept: two 20-megapixel PNGs (the source-pixel limit)."""
    out = case_png_memory(s, concurrency=1)
    out["detail"] = "one request of 2 x 20 MP PNGs"
    return out


def _threads(n: int, fn):
    out = [None] * n

    def run(i):
        try:
            out[i] = fn()
        except Exception as exc:
            out[i] = type(exc).__name__

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def case_query_key_in_log(s: Server) -> dict:
    status, secs, _ = timed_post(s.url, f"{wire().path}?api_key={SECRET}", json=wire().body("s"))
    time.sleep(0.5)
    leaked = SECRET in s.log.read_text(errors="replace")
    return {"status": "leaked" if leaked else "scrubbed", "seconds": round(secs, 2), "detail": f"http {status}"}


def case_healthz_path(s: Server) -> dict:
    body = httpx.get(s.url + "/healthz", timeout=10).json()
    paths = [f"{k}={v}" for k, v in body.items() if isinstance(v, str) and (v.startswith("/") or ":\\" in v)]
    return {"status": "local path" if paths else "clean", "seconds": 0, "detail": "; ".join(paths)[:200]}
