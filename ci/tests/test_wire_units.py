"""The wire layer in-process, no server process: blink.web.endpoint's Endpoint (request ids, the key, errors in each
wire's shape, an unexpected exception as a 500, a full gate), not_routed (404/405 + Allow), the answers'
JSON writer (FastJSONResponse), and blink.server.create_app over the demo model. Request bodies (blink.web.bodies)
are test_request_bodies.py's, the OpenAI wire's parsers test_openai_parsers.py's.

The apps are real Starlette apps driven by Starlette's TestClient: blink's own Endpoint and routes around
handlers that report what reached them (helpers/tiny_app.py), and blink.server.create_app over the demo model for
what the whole app adds (the MCP route, the real route table)."""

from __future__ import annotations

import dataclasses
import json
import logging
import re

import pytest
from starlette.testclient import TestClient

from blink.errors import InvalidRequest, NoRoute, Overloaded, PayloadTooLarge, QuotaExceeded, Unauthorized
from blink.web.admission import Admission, Policy
from blink.web.auth import ApiKey
from helpers import UNROUTED, check_unrouted
from helpers.tiny_app import CHAT, SYSTEMONE, Handlers, context, openai_error, systemone_error, tiny_app

KEY = "k-unit-Zq81"
REQUEST_ID = re.compile(r"^req_[0-9a-f]{32}$")


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
