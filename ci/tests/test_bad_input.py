"""Bad input gets the wire's own 4xx, never a 5xx, and the server keeps serving."""

from __future__ import annotations

import gzip
import json
import socket
import zlib
from urllib.parse import urlparse

import httpx
import pytest
import zstandard

from helpers import ROOT_UNROUTED, UNROUTED, check_unrouted

pytestmark = pytest.mark.e2e

GOOD = {"state": "hello", "questions": {"q": {"type": "noul", "instructions": "ok?"}}}


def post(url, content: bytes, headers=None):
    return httpx.post(
        url + "/v1/systemone",
        content=content,
        headers={"content-type": "application/json", **(headers or {})},
        timeout=60,
    )


def q(**question):
    return json.dumps({"state": "s", "questions": {"the-q": question}}).encode()


CASES = {
    "not json": (b"{nope", 422, ["body", 1]),
    "json array": (b"[1, 2]", 422, ["body"]),
    "state missing": (json.dumps({"questions": {"q": {"type": "noul"}}}).encode(), 422, ["body", "state"]),
    "state null": (json.dumps({"state": None, "questions": {"q": {"type": "noul"}}}).encode(), 422, ["body", "state"]),
    "state number": (json.dumps({"state": 3, "questions": {"q": {"type": "noul"}}}).encode(), 422, ["body", "state"]),
    "questions list": (
        json.dumps({"state": "s", "questions": [{"type": "noul"}]}).encode(),
        422,
        ["body", "questions"],
    ),
    "zero questions": (json.dumps({"state": "s", "questions": {}}).encode(), 422, ["body", "questions"]),
    "unknown type": (q(type="boolean"), 422, ["body", "questions", "the-q"]),
    "missing type": (q(instructions="x"), 422, ["body", "questions", "the-q"]),
    "box on a text model": (q(type="box", instructions="where?"), 422, ["body", "questions", "the-q"]),
    "empty choice criteria": (q(type="choice", criteria={}), 422, ["body", "questions", "the-q"]),
    "choice criteria list": (q(type="choice", criteria=["a", "b"]), 422, ["body", "questions", "the-q"]),
    "256 options": (
        q(type="choice", criteria={f"o{i}": None for i in range(256)}),
        422,
        ["body", "questions", "the-q"],
    ),
    "256 levels": (q(type="score", criteria=[str(i) for i in range(256)]), 422, ["body", "questions", "the-q"]),
    "score map": (q(type="score", criteria={"0": "a", "1": "b"}), 422, ["body", "questions", "the-q"]),
    "null level": (q(type="score", criteria=["a", None]), 422, ["body", "questions", "the-q", "score", "criteria", 1]),
    "instructions number": (q(type="noul", instructions=5), 422, ["body", "questions", "the-q"]),
    "question not object": (
        json.dumps({"state": "s", "questions": {"the-q": "yes?"}}).encode(),
        422,
        ["body", "questions", "the-q"],
    ),
    "images on a text model": (
        json.dumps({**GOOD, "assets": {"<i>": {"type": "image", "format": "png", "data_base64": "AAAA"}}}).encode(),
        422,
        ["body", "assets"],
    ),
    "not utf-8": (b'{"state": "\xff\xfe", "questions": {}}', 422, None),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_request_gets_a_located_422(server, name):
    content, status, loc = CASES[name]
    r = post(server, content)
    assert r.status_code == status, r.text
    body = r.json()
    assert isinstance(body["error"], str) and body["error"]
    assert isinstance(body["detail"], list) and body["detail"][0]["msg"]
    if loc is not None:
        assert body["detail"][0]["loc"] == loc
    assert r.headers["x-typesafe-request-id"].startswith("req_")
    assert "server-timing" in r.headers
    assert post(server, json.dumps(GOOD).encode()).status_code == 200  # still serving


def test_too_long_state_is_refused_not_truncated(demo_root):
    from helpers import blink_serve, running

    with running(blink_serve("--max-context-tokens", "200"), demo_root, name="serve-small-ctx") as url:
        r = post(url, json.dumps({"state": "word " * 400, "questions": {"long": {"type": "noul"}}}).encode())
        assert r.status_code == 422
        assert r.json()["detail"][0]["loc"] == ["body", "questions", "long"]
        assert "200" in r.json()["error"] and r.json()["detail"][0]["type"] == "context_length_exceeded"


def test_body_over_the_cap_is_413(server):
    big = b'{"state": "' + b"x" * (100 * 1024 * 1024) + b'", "questions": {}}'
    r = post(server, big)
    assert r.status_code == 413
    assert r.json()["detail"]["error_type"] == "payload_too_large"
    assert post(server, json.dumps(GOOD).encode()).status_code == 200


def test_decompression_bomb_is_413(server):
    bomb = zstandard.ZstdCompressor().compress(b'{"state": "' + b"a" * (80 * 1024 * 1024) + b'"}')
    r = post(server, bomb, {"content-encoding": "zstd"})
    assert r.status_code == 413


@pytest.mark.parametrize("encoding", ["zstd", "gzip", "deflate"])
def test_compressed_bodies_decode(server, encoding):
    raw = json.dumps(GOOD).encode()
    data = {"zstd": zstandard.ZstdCompressor().compress, "gzip": gzip.compress, "deflate": zlib.compress}[encoding](raw)
    r = post(server, data, {"content-encoding": encoding})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("encoding", ["zstd", "gzip", "deflate", "br"])
def test_invalid_compressed_data_is_4xx(server, encoding):
    r = post(server, b"definitely not compressed", {"content-encoding": encoding})
    assert 400 <= r.status_code < 500, r.text
    assert r.json()["detail"]["error_type"]
    assert post(server, json.dumps(GOOD).encode()).status_code == 200


def test_truncated_body_does_not_hurt_the_server(server):
    """A client that promises 1000 bytes, sends 20 and hangs up."""
    u = urlparse(server)
    with socket.create_connection((u.hostname, u.port)) as s:
        s.sendall(
            b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 1000\r\n\r\n{"state": "trunc'
        )
    truncated_json = json.dumps(GOOD).encode()[:-7]
    r = post(server, truncated_json)
    assert r.status_code == 422
    assert post(server, json.dumps(GOOD).encode()).status_code == 200


def test_unknown_fields_are_ignored(server):
    body = {
        **GOOD,
        "x_trace_id": "t",
        "seed": 3,
        "questions": {
            "q": {"type": "noul", "instructions": "ok?", "weight": 2, "criteria": {"true": "yes", "maybe": "?"}}
        },
    }
    assert post(server, json.dumps(body).encode()).status_code == 200


def test_unknown_path_is_404_with_request_id(server):
    r = httpx.get(server + "/v1/nothing-here")
    assert r.status_code == 404 and r.headers["x-typesafe-request-id"].startswith("req_")


@pytest.mark.parametrize("method,path,status", UNROUTED)
def test_unrouted_v1_requests_answer_in_the_wire_shape(server, method, path, status):
    check_unrouted(httpx.request(method, server + path), path, status)


@pytest.mark.parametrize("method,path,status", ROOT_UNROUTED)
def test_unrouted_root_requests_answer_in_openai_shape(server, method, path, status):
    """Not FastAPI's `{"detail": "Not Found"}`: LlamaIndex's JinaRerank, pointed at a server without the route it
    calls, crashed with KeyError on it."""
    check_unrouted(httpx.request(method, server + path), path, status)


def test_a_route_asked_with_a_trailing_slash_is_redirected_there(server):
    """The root's catch-all keeps Starlette's redirect for a path that names a route but for its trailing slash."""
    r = httpx.post(server + "/mcp/", json={})
    assert r.status_code == 307 and r.headers["location"] == server + "/mcp"
    assert httpx.get(server + "/healthz/").status_code == 307
