"""Request bodies in-process, no server process: blink.web.bodies behind blink's Endpoint (the caps on declared,
streamed and decoded sizes, content encodings, bad JSON, multipart) and its `parse_request` alone.

The app is a real Starlette app driven by Starlette's TestClient: blink's own Endpoint and routes around handlers
that report what reached them (helpers/tiny_app.py, shared with test_wire_units.py)."""

from __future__ import annotations

import dataclasses
import gzip
import json
import zlib

import pytest
import zstandard
from starlette.testclient import TestClient

from blink.errors import PayloadTooLarge
from blink.limits import Limits
from blink.web import bodies
from helpers.tiny_app import CHAT, SYSTEMONE, Handlers, context, openai_error, systemone_error, tiny_app


@pytest.fixture
def handler():
    return Handlers()


@pytest.fixture
def client(handler):
    with TestClient(tiny_app(context(), handler), raise_server_exceptions=False) as c:
        yield c


# --- bodies: caps, encodings, multipart -----------------------------------------------------------------------------
def capped(handler, max_body: int = 64, max_decoded: int = 256) -> TestClient:
    ctx = context(limits=dataclasses.replace(Limits(), max_body_bytes=max_body, max_decoded_bytes=max_decoded))
    return TestClient(tiny_app(ctx, handler), raise_server_exceptions=False)


def test_a_declared_length_over_the_cap_is_413_before_the_handler(handler):
    with capped(handler) as client:
        r = client.post(SYSTEMONE, content=b"{}" + b" " * 100, headers={"content-type": "application/json"})
        body = systemone_error(r, 413, "payload_too_large")
        assert "102 bytes" in body["error"] and "64" in body["error"]
        assert openai_error(client.post(CHAT, content=b" " * 65), 413, "invalid_request_error")["code"] == (
            "body_too_large"
        )
        assert client.post(SYSTEMONE, content=b"{}" + b" " * 62).status_code == 200  # exactly the cap
    assert len(handler.calls) == 1


def test_a_streamed_body_without_a_length_is_cut_off_at_the_cap(handler):
    sent = []

    def chunks():
        for _ in range(100):
            sent.append(1)
            yield b" " * 16

    with capped(handler) as client:
        r = client.post(SYSTEMONE, content=chunks())
        assert "content-length" not in r.request.headers
        assert "over 64 bytes" in systemone_error(r, 413, "payload_too_large")["error"]
    assert not handler.calls


@pytest.mark.parametrize(
    "encoding,encode",
    [
        ("gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("zstd", lambda data: zstandard.ZstdCompressor().compress(data)),
        ("GZIP", gzip.compress),
    ],
)
def test_compressed_bodies_are_decoded_before_parsing(client, encoding, encode):
    body = {"state": "héllo", "questions": {"q": {"type": "noul"}}}
    content = encode(json.dumps(body).encode())
    r = client.post(SYSTEMONE, content=content, headers={"content-encoding": encoding})
    assert r.status_code == 200 and r.json()["body"] == body


def test_a_body_that_decodes_past_the_limit_is_413_and_bad_data_is_a_4xx(handler):
    with capped(handler, max_body=10_000, max_decoded=256) as client:
        bomb = gzip.compress(b" " * 100_000)
        assert len(bomb) < 10_000
        systemone_error(
            client.post(SYSTEMONE, content=bomb, headers={"content-encoding": "gzip"}), 413, "payload_too_large"
        )
        for encoding in ("gzip", "deflate", "zstd"):
            r = client.post(CHAT, content=b"not compressed at all", headers={"content-encoding": encoding})
            assert 400 <= r.status_code < 500 and r.json()["error"]["type"] == "invalid_request_error", r.text
        r = client.post(SYSTEMONE, content=b"{}", headers={"content-encoding": "br"})
        assert 400 <= r.status_code < 500, r.text
    assert not handler.calls


@pytest.mark.parametrize("content", [b'{"a": ', b"\xff\xfe", b'{"a": "\\ud800"}', b"[" * 200 + b"]" * 200])
def test_bad_json_is_a_located_refusal_in_each_shape(client, handler, content):
    r = client.post(SYSTEMONE, content=content, headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][0] == "body", r.text
    openai_error(client.post(CHAT, content=content), 400, "invalid_request_error")
    assert not handler.calls


def multipart(parts: list[tuple[str, str, bytes]], boundary: str = "blinkboundary") -> tuple[bytes, str]:
    out = b""
    for name, ctype, data in parts:
        out += f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n'.encode()
        out += (f"Content-Type: {ctype}\r\n" if ctype else "").encode() + b"\r\n" + data + b"\r\n"
    return out + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def test_multipart_gives_the_request_part_as_the_body_and_the_rest_as_parts(client):
    content, ctype = multipart(
        [
            ("request", "application/json", b'{"state": {"photo": {"$asset": "photo"}}}'),
            ("photo", "image/png", b"\x89PNG-bytes"),
        ]
    )
    r = client.post(SYSTEMONE, content=content, headers={"content-type": ctype})
    assert r.status_code == 200, r.text
    assert r.json() == {
        "body": {"state": {"photo": {"$asset": "photo"}}},
        "parts": {"photo": ["image/png", "\x89PNG-bytes"]},
    }
    refused = client.post(CHAT, content=content, headers={"content-type": ctype})  # a JSON-only route
    assert openai_error(refused, 400, "invalid_request_error")["code"] == "unsupported_media"
    zipped = client.post(
        SYSTEMONE, content=gzip.compress(content), headers={"content-type": ctype, "content-encoding": "gzip"}
    )
    assert zipped.json() == r.json()  # decoded first, then split


@pytest.mark.parametrize(
    "parts,ctype,loc,kind",
    [
        ([("photo", "image/png", b"x")], None, ["body", "request"], "missing"),
        ([("request", "", b"{}"), ("a", "", b"1"), ("a", "", b"2")], None, ["body", "a"], "multipart_invalid"),
        ([("request", "", b"{}")], "multipart/form-data", ["body"], "multipart_invalid"),
        ([("request", "", b'{"a": ')], None, ["body"], None),
    ],
)
def test_bad_multipart_is_a_located_422(client, handler, parts, ctype, loc, kind):
    content, default = multipart(parts)
    r = client.post(SYSTEMONE, content=content, headers={"content-type": ctype or default})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"][0]
    assert detail["loc"][: len(loc)] == loc and (kind is None or detail["type"] == kind), detail
    assert not handler.calls


def test_parse_request_alone():
    limits = Limits()
    assert bodies.parse_request(b'{"a": [1, 2]}', None, "application/json", limits) == ({"a": [1, 2]}, {})
    assert bodies.parse_request(zlib.compress(b"[]"), "deflate", "", limits) == ([], {})
    content, ctype = multipart([("request", "", b"{}"), ("doc", "text/plain", b"hi")])
    assert bodies.parse_request(
        content, None, ctype.upper().replace("BOUNDARY=BLINKBOUNDARY", "boundary=blinkboundary"), limits
    ) == (
        {},
        {"doc": ("text/plain", b"hi")},
    )
    with pytest.raises(PayloadTooLarge):
        bodies.parse_request(gzip.compress(b"0" * 1000), "gzip", "", dataclasses.replace(limits, max_decoded_bytes=100))
