"""A tiny app for the wire layer's in-process tests (test_wire_units.py, test_request_bodies.py): blink's own
Endpoint and routes (/v1/systemone in System One's shape, /v1/chat/completions and /v1/models in OpenAI's, and
not_routed behind them) around handlers written here that report what reached them, and the checks of an error in
each wire's shape. It imports blink, so it is imported as `helpers.tiny_app` (not re-exported by `helpers`)."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from blink.api import systemone
from blink.api.openai import protocol
from blink.context import Context
from blink.errors import InvalidRequest
from blink.web.endpoint import Body, Endpoint, not_routed

SYSTEMONE = "/v1/systemone"  # System One's shape
CHAT = "/v1/chat/completions"  # OpenAI's shape


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
