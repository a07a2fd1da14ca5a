"""The wire layer in-process, no server process: blink.web.endpoint's Endpoint (request ids, the key, errors in each
wire's shape, an unexpected exception as a 500), not_routed (404/405 + Allow), blink.web.bodies (caps, encodings,
multipart), and the OpenAI wire's parsers (blink.api.openai.protocol, blink.api.openai.constraints).

The apps are real Starlette apps driven by Starlette's TestClient: blink's own Endpoint and routes around
handlers written here (they report what reached them), and blink.server.create_app over the demo model for
what the whole app adds (the MCP route, the real route table)."""

from __future__ import annotations

import dataclasses
import gzip
import json
import logging
import re
import zlib

import pytest
import zstandard
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from blink.api import systemone
from blink.api.openai import constraints, protocol
from blink.context import Context
from blink.errors import InvalidRequest, NoRoute, Overloaded, PayloadTooLarge, QuotaExceeded, Unauthorized
from blink.limits import Limits
from blink.plan import GenerationParams
from blink.web import bodies
from blink.web.admission import Admission, Policy
from blink.web.auth import ApiKey
from blink.web.endpoint import Body, Endpoint, not_routed
from helpers import UNROUTED, check_unrouted

KEY = "k-unit-Zq81"
REQUEST_ID = re.compile(r"^req_[0-9a-f]{32}$")
SYSTEMONE = "/v1/systemone"  # System One's shape
CHAT = "/v1/chat/completions"  # OpenAI's shape


# --- a tiny app: blink's Endpoint around handlers that say what reached them ----------------------------------------
class Handlers:
    """The handlers behind the routes, and the calls that reached them."""

    def __init__(self):
        self.calls = []
        self.fail_with: BaseException | None = None

    async def __call__(self, call):
        self.calls.append(call)
        if self.fail_with is not None:
            raise self.fail_with
        if call.body == {"plain": True}:
            return PlainTextResponse("as it is", status_code=202)
        parts = {name: [ctype, data.decode("latin-1")] for name, (ctype, data) in call.parts.items()}
        return {"body": call.body, "parts": parts}


def context(**fields) -> Context:
    """A real Context; the decision service and the chat service are not used by these routes."""
    return Context(service=None, chats=None, served_name="blink-unit", **fields)


def refuse_marked(call):
    """The route's check (before admission): a body that says {"refuse": true} is refused by it."""
    if isinstance(call.body, dict) and call.body.get("refuse") is True:
        raise InvalidRequest("refused by the check", loc=["body", "refuse"], kind="checked")
    return "checked"


def tiny_app(ctx: Context, handler: Handlers) -> Starlette:
    routes = [
        Route(
            SYSTEMONE,
            Endpoint(ctx, systemone.WIRE, handler, body=Body(multipart=True), check=refuse_marked, admit="decide"),
            methods=["POST"],
        ),
        Route(CHAT, Endpoint(ctx, protocol.WIRE, handler, body=Body("chat requests"), admit="chat"), methods=["POST"]),
        Route("/v1/models", Endpoint(ctx, protocol.WIRE, handler), methods=["GET"]),
    ]
    return Starlette(
        routes=routes
        + [not_routed(ctx, "/v1/systemone", systemone.WIRE, routes), not_routed(ctx, "/v1/", protocol.WIRE, routes)]
    )


@pytest.fixture
def handler():
    return Handlers()


@pytest.fixture
def client(handler):
    with TestClient(tiny_app(context(), handler), raise_server_exceptions=False) as c:
        yield c


@pytest.fixture
def keyed(handler):
    with TestClient(tiny_app(context(auth=ApiKey(KEY)), handler), raise_server_exceptions=False) as c:
        yield c


def systemone_error(r, status: int, error_type: str) -> dict:
    assert r.status_code == status, r.text
    body = r.json()
    assert isinstance(body["error"], str) and body["detail"]["error_type"] == error_type, body
    assert body["detail"]["message"] == body["error"]
    return body


def openai_error(r, status: int, kind: str) -> dict:
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["type"] == kind and isinstance(error["message"], str) and {"param", "code"} <= error.keys(), error
    return error


# --- request ids and timing -----------------------------------------------------------------------------------------
def test_every_answer_carries_a_new_request_id_under_its_wires_header_names(client):
    one = client.post(SYSTEMONE, json={"a": 1})
    two = client.post(SYSTEMONE, json={"a": 1})
    assert one.status_code == two.status_code == 200 and one.json() == {"body": {"a": 1}, "parts": {}}
    assert REQUEST_ID.match(one.headers["x-typesafe-request-id"]) and "x-request-id" not in one.headers
    assert one.headers["x-typesafe-request-id"] != two.headers["x-typesafe-request-id"]
    chat = client.post(CHAT, json={"a": 1})
    assert REQUEST_ID.match(chat.headers["x-request-id"])
    assert chat.headers["x-request-id"] == chat.headers["x-typesafe-request-id"]
    for r in (one, chat):
        assert re.fullmatch(r"(\w+;dur=\d+\.\d{2}, )*total;dur=\d+\.\d{2}", r.headers["server-timing"])


def test_the_handler_sees_the_id_it_answers_under_and_a_response_passes_as_it_is(client, handler):
    r = client.post(CHAT, json={"plain": True})
    assert (r.status_code, r.text) == (202, "as it is")
    assert r.headers["x-request-id"] == handler.calls[-1].request_id  # our headers added to the handler's response


# --- the key ----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("authorization", [None, "Bearer wrong", f"Basic {KEY}", "Bearer", KEY])
def test_without_the_key_each_wire_says_401_with_a_bearer_challenge(keyed, handler, authorization):
    headers = {"Authorization": authorization} if authorization else {}
    r = keyed.post(SYSTEMONE, json={"a": 1}, headers=headers)
    systemone_error(r, 401, "authentication_error")
    assert r.headers["www-authenticate"] == "Bearer" and REQUEST_ID.match(r.headers["x-typesafe-request-id"])
    r = keyed.post(CHAT, json={"a": 1}, headers=headers)
    assert openai_error(r, 401, "authentication_error")["code"] == "invalid_api_key"
    assert r.headers["www-authenticate"] == "Bearer"
    r = keyed.get("/v1/models", headers=headers)
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert not handler.calls  # refused before the handler
    assert KEY not in r.text


@pytest.mark.parametrize("authorization", [f"Bearer {KEY}", f"bearer {KEY}", f"  Bearer   {KEY}  "])
def test_the_key_lets_the_request_through(keyed, handler, authorization):
    r = keyed.post(SYSTEMONE, json={"a": 1}, headers={"Authorization": authorization})
    assert r.status_code == 200 and r.json()["body"] == {"a": 1} and len(handler.calls) == 1
    assert "www-authenticate" not in r.headers


def test_without_a_key_configured_any_authorization_is_accepted(client):
    assert client.post(SYSTEMONE, json={}, headers={"Authorization": "Bearer anything"}).status_code == 200


# --- errors in the wire's shape -------------------------------------------------------------------------------------
def test_a_located_refusal_is_422_on_system_one_and_400_naming_the_param_on_openai(client, handler):
    handler.fail_with = InvalidRequest("no such type", loc=["body", "questions", "q", "type"], kind="bad_type")
    body = client.post(SYSTEMONE, json={}).json()
    assert body == {
        "error": "no such type",
        "detail": [{"type": "bad_type", "loc": ["body", "questions", "q", "type"], "msg": "no such type"}],
    }
    r = client.post(CHAT, json={})
    error = openai_error(r, 400, "invalid_request_error")
    assert error == {
        "message": "no such type",
        "type": "invalid_request_error",
        "param": "questions.q.type",
        "code": "bad_type",
    }


@pytest.mark.parametrize(
    "error,status,systemone_type,openai_type,headers",
    [
        (Overloaded(retry_after=3), 529, "overloaded_error", "overloaded_error", {"retry-after": "3"}),
        (
            QuotaExceeded(retry_after=42),
            429,
            "rate_limit_error",
            "rate_limit_error",
            {"retry-after": "42", "x-should-retry": "false"},
        ),
        (PayloadTooLarge("too big"), 413, "payload_too_large", "invalid_request_error", {}),
        (NoRoute("nothing"), 404, "not_found_error", "invalid_request_error", {}),
        (Unauthorized("who?"), 401, "authentication_error", "authentication_error", {"www-authenticate": "Bearer"}),
    ],
)
def test_each_error_keeps_its_status_and_headers_in_both_shapes(
    client, handler, error, status, systemone_type, openai_type, headers
):
    handler.fail_with = error
    for path, check, kind in ((SYSTEMONE, systemone_error, systemone_type), (CHAT, openai_error, openai_type)):
        r = client.post(path, json={})
        check(r, status, kind)
        assert {name: r.headers.get(name) for name in headers} == headers


def test_an_unexpected_exception_is_a_logged_500_in_the_wires_shape(client, handler, caplog):
    handler.fail_with = RuntimeError("the accelerator caught fire")
    with caplog.at_level(logging.ERROR, logger="blink"):
        r = client.post(SYSTEMONE, json={})
    body = systemone_error(r, 500, "internal_error")
    assert body["error"] == "internal error: RuntimeError: the accelerator caught fire"
    request_id = r.headers["x-typesafe-request-id"]
    assert any(request_id in rec.getMessage() and rec.exc_info for rec in caplog.records)  # with its traceback
    r = client.post(CHAT, json={})
    assert "RuntimeError" in openai_error(r, 500, "internal_error")["message"]
    assert client.post(CHAT, json={}).headers["x-request-id"] != r.headers["x-request-id"]  # and it keeps serving


def test_an_error_that_echoes_a_lone_surrogate_is_still_ascii_json(client, handler):
    handler.fail_with = InvalidRequest("bad name '\ud800'", loc=["body", "questions", "\ud800"])
    for path in (SYSTEMONE, CHAT):
        r = client.post(path, json={})
        r.content.decode("ascii")  # escaped, not a 500 from an unencodable body
        assert "\\ud800" in r.text and "\ud800" in json.dumps(r.json(), ensure_ascii=False)


def test_a_full_gate_is_529_with_retry_after_and_the_place_comes_back(handler):
    ctx = context(admission=Admission.standard(max_queued=0, max_batch=1, reserved_decide=0))
    with TestClient(tiny_app(ctx, handler), raise_server_exceptions=False) as client:
        with ctx.admission.gate("decide").enter_sync():  # the only place, taken
            r = client.post(SYSTEMONE, json={"a": 1})
            systemone_error(r, 529, "overloaded_error")
            assert int(r.headers["retry-after"]) >= 1 and not handler.calls
            # the route's check comes before admission: a request it refuses is refused at once, not with 529
            systemone_error_detail = client.post(SYSTEMONE, json={"refuse": True}).json()["detail"]
            assert systemone_error_detail == [
                {"type": "checked", "loc": ["body", "refuse"], "msg": "refused by the check"}
            ]
        assert client.post(SYSTEMONE, json={"a": 1}).status_code == 200
        assert handler.calls[-1].checked == "checked"  # what the check made of the body reaches the handler
        assert sum(ctx.admission.state()["decide"]["held"].values()) == 0  # the handler's place was given back


# --- not_routed -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "method,path,status,allow",
    [
        ("GET", SYSTEMONE, 405, "POST"),
        ("PUT", CHAT, 405, "POST"),
        ("POST", "/v1/models", 405, "GET, HEAD"),
        ("GET", "/v1/nothing-here", 404, None),
        ("POST", "/v1/systemone/batch", 404, None),
        ("DELETE", "/v1/", 404, None),
    ],
)
def test_unknown_paths_and_methods_are_404_or_405_with_allow(client, handler, method, path, status, allow):
    r = client.request(method, path)
    check_unrouted(r, path, status)
    assert r.headers.get("allow") == allow
    assert path in (r.json()["error"] if path.startswith(SYSTEMONE) else r.json()["error"]["message"])
    assert not handler.calls


def test_not_routed_answers_unknown_paths_without_the_key(keyed):
    """A typo'd path is a 404 before it is a 401: the route table is no secret, the answers are."""
    check_unrouted(keyed.get("/v1/nothing-here"), "/v1/nothing-here", 404)


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


# --- the whole app over the demo model ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def app(engine, demo_dir):
    """blink.server.create_app over the session's demo engine, with a key; its lifespan (the MCP server) runs."""
    from blink.server import ServedModel, build_chat_engine, build_context, create_app
    from blink.settings import Settings

    settings = Settings(model=str(demo_dir), api_key=KEY)
    served = ServedModel(engine.loaded, engine, build_chat_engine(settings, engine.loaded))
    ctx = build_context(settings, served, warmup=False)
    with TestClient(create_app(ctx), raise_server_exceptions=False) as client:
        yield client


def test_a_decision_refused_after_its_check_is_no_longer_on_its_way(engine, demo_dir):
    """A decision counted on its way to the batcher from its check is let go when its exchange ends without
    reaching the queue (here: 529, no place for it), on both decision routes: a window never waits for it."""
    from blink.server import ServedModel, build_chat_engine, build_context, create_app
    from blink.settings import Settings

    settings = Settings(model=str(demo_dir), batch_window_ms=500, max_batch_requests=1, max_queued_requests=1)
    served = ServedModel(engine.loaded, engine, build_chat_engine(settings, engine.loaded))
    ctx = build_context(settings, served, warmup=False)
    ctx = dataclasses.replace(ctx, admission=Admission({"decide": Policy(1), "chat": Policy(1)}))
    decision = {"state": "The parcel is late.", "questions": {"late": {"type": "noul", "instructions": "Late?"}}}
    mapped = {
        "model": ctx.served_name,
        "input": "The parcel is late.",
        "questions": [{"type": "predicate", "name": "late", "instructions": "Late?"}],
    }
    with TestClient(create_app(ctx), raise_server_exceptions=False) as client:
        with ctx.admission.gate("decide").enter_sync():  # the only place, taken
            systemone_error(client.post(SYSTEMONE, json=decision), 529, "overloaded_error")
            assert client.post("/v1/decisions", json=mapped).status_code == 529
            assert ctx.service.batcher.incoming == 0
        assert client.post(SYSTEMONE, json=decision).status_code == 200
        assert client.post("/v1/decisions", json=mapped).status_code == 200
        assert client.get("/healthz").json()["batching"]["on_its_way"] == 0


def test_the_app_answers_a_decision_with_its_request_id(app):
    body = {"state": "The parcel is late.", "questions": {"late": {"type": "noul", "instructions": "Late?"}}}
    r = app.post(SYSTEMONE, json=body, headers={"Authorization": f"Bearer {KEY}"})
    assert r.status_code == 200, r.text
    assert set(r.json()["answers"]) == {"late"} and 0 <= r.json()["answers"]["late"]["noul"] <= 1
    assert REQUEST_ID.match(r.headers["x-typesafe-request-id"]) and "server-timing" in r.headers
    systemone_error(app.post(SYSTEMONE, json=body), 401, "authentication_error")


@pytest.mark.parametrize(
    "metadata,param",
    [("NaN", None), ("-Infinity", None), ("1e400", "metadata.a")],
)
def test_a_number_json_cannot_carry_back_is_refused_not_echoed(app, metadata, param):
    """/v1/responses echoes `metadata`: a number that has no JSON form is the client's 400, never a 500 and never
    echoed as something else (null)."""
    raw = '{"model": "demo", "input": "hi", "max_output_tokens": 2, "metadata": {"a": ' + metadata + "}}"
    r = app.post(
        "/v1/responses",
        content=raw,
        headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
    )
    assert r.status_code == 400, r.text
    assert r.json()["error"]["type"] == "invalid_request_error" and r.json()["error"]["param"] == param


def test_an_integer_past_64_bits_is_echoed_exactly(app):
    big = 2**80 + 1
    raw = '{"model": "demo", "input": "hi", "max_output_tokens": 2, "metadata": {"a": ' + str(big) + "}}"
    r = app.post(
        "/v1/responses",
        content=raw,
        headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
    )
    assert r.status_code == 200, r.text
    assert json.loads(r.content)["metadata"] == {"a": big}


def test_the_apps_route_table_answers_unrouted_requests_in_each_wires_shape(app):
    for method, path, status in UNROUTED:
        check_unrouted(app.request(method, path), path, status)


def test_the_apps_mcp_route_asks_for_the_key(app):
    r = app.post(
        "/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Accept": "application/json, text/event-stream"},
    )
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"


def test_answers_are_written_as_starlette_writes_them():
    """`FastJSONResponse` (orjson) against Starlette's `JSONResponse` on any JSON value a route can answer: the same
    value back, and the same bytes wherever no float needs an exponent (1e-7 is written for 1e-07 there)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st
    from starlette.responses import JSONResponse

    from blink.web.endpoint import FastJSONResponse

    scalars = (
        st.none()
        | st.booleans()
        | st.integers(min_value=-(2**63), max_value=2**64 - 1)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(st.characters(exclude_categories=("Cs",)))
    )
    values = st.recursive(
        scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    )

    @settings(max_examples=400, deadline=None)
    @given(values)
    def same(value):
        ours, theirs = FastJSONResponse(value), JSONResponse(value)
        assert json.loads(ours.body) == json.loads(theirs.body)
        assert ours.headers["content-type"] == theirs.headers["content-type"]
        if re.search(rb"\d[eE][-+]?\d", theirs.body) is None:
            assert ours.body == theirs.body

    same()


def test_an_answers_float_subclass_is_written_as_its_number():
    import numpy

    from blink.web.endpoint import FastJSONResponse

    assert FastJSONResponse({"p": numpy.float64(0.25)}).body == b'{"p":0.25}'
    with pytest.raises(TypeError):
        FastJSONResponse({"p": object()})
