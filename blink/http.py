"""One route wrapper per wire family: what every blink route does around its own few lines.

`Endpoint(ctx, wire, handler, admit=kind)` is the ASGI app of one route. It gives the request an id, checks
the API key, enters the admission gate of its kind of work (blink.admission: refused with 529 + Retry-After
before a byte of the body is read, so a refusal costs microseconds), reads the body (blink.bodies), calls
`handler(call)` and answers: a dict as JSON with 200, a Response as it
is. A BlinkError is rendered in the wire's own shape; anything else is logged and answered 500 in that shape.
Every response carries the request id (under the wire's header names) and `server-timing`.

Routes are plain ASGI apps, not FastAPI dependencies or exception handlers, because the Space grafts them
onto Gradio's app where our handlers and middleware don't exist. For the same reason unknown paths and
methods under /v1/ are answered by routes too (`not_routed`, listed after the real ones).

`cancel_on_disconnect=True` (chat): once the body is read, the client's disconnect cancels the handler and
the response alike, as vLLM's `with_cancellation` does, so streamed and non-streamed chat stop the same way
(Starlette's StreamingResponse may notice first under ASGI 2.3; it cancels the same scope of work).
What a handler holds for the exchange (`call.held`: a chat slot, a generator) is let go when it ends,
however it ends.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

import anyio
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Match, Route

from .admission import KEYED
from .bodies import read_request
from .errors import BlinkError, EngineFailure, NoRoute, Unauthorized
from .service import Timing

log = logging.getLogger("blink")

UNAUTHORIZED = "missing or invalid API key: send Authorization: Bearer <key>"


def new_request_id() -> str:
    return "req_" + uuid.uuid4().hex


@dataclass(frozen=True)
class Wire:
    """How one wire family answers: `render(error) -> (status, body)` and the headers that carry the id."""

    render: Callable[[BlinkError], tuple[int, dict]]
    id_headers: tuple[str, ...] = ("x-typesafe-request-id",)

    def headers(self, request_id: str, timing: Timing) -> dict:
        return {**{name: request_id for name in self.id_headers}, "server-timing": timing.header()}

    def error_response(self, error: BlinkError, request_id: str, timing: Timing) -> Response:
        status, body = self.render(error)
        headers = {**self.headers(request_id, timing), **error.headers}
        if isinstance(error, Unauthorized):
            headers["WWW-Authenticate"] = "Bearer"
        return AsciiJSONResponse(body, status, headers)


class AsciiJSONResponse(JSONResponse):
    """An error body is always encodable: whatever a message echoes (a lone surrogate too) is escaped."""

    def render(self, content) -> bytes:
        return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode("ascii")


@dataclass
class Call:
    """One request as its handler sees it: checked, its body read, named and timed."""

    request: Request
    request_id: str
    timing: Timing
    held: AsyncExitStack  # let go when the exchange ends: the admission place, a generator
    caller: Any = None
    body: Any = None
    parts: dict = field(default_factory=dict)  # multipart assets: {name: (content type, bytes)}
    ticket: Any = None  # the admission place held for the whole exchange (blink.admission.Ticket)


Handler = Callable[[Call], Awaitable["dict | Response"]]


class Endpoint:
    """The ASGI app of one route (an object, not a function, so Starlette hands it the raw ASGI call)."""

    def __init__(
        self,
        ctx,
        wire: Wire,
        handler: Handler,
        *,
        auth: bool = True,
        read_body: bool = True,
        cancel_on_disconnect: bool = False,
        admit: str | None = None,
    ):
        self.ctx, self.wire, self.handler, self.admit = ctx, wire, handler, admit
        self.auth, self.read_body, self.cancel_on_disconnect = auth, read_body, cancel_on_disconnect

    async def __call__(self, scope, receive, send) -> None:
        ctx, wire = self.ctx, self.wire
        request = Request(scope, receive)
        async with AsyncExitStack() as held:
            call = Call(request, new_request_id(), Timing(), held, caller=ctx.caller_of(request))
            try:
                if self.auth and not ctx.auth.allows(request.headers.get("authorization")):
                    raise Unauthorized(UNAUTHORIZED)
                if self.admit:  # API callers passed the key (or none is set): keyed
                    call.ticket = await held.enter_async_context(ctx.admission.enter(self.admit, KEYED))
                if self.read_body:
                    call.body, call.parts = await read_request(request, ctx.limits)
            except ClientDisconnect:
                return  # nobody to answer
            except BlinkError as error:
                await wire.error_response(error, call.request_id, call.timing)(scope, receive, send)
                return
            if not self.cancel_on_disconnect:
                await answer(wire, self.handler, call, send)
                return
            async with anyio.create_task_group() as group:
                group.start_soon(cancel_when_gone, receive, group.cancel_scope)
                await answer(wire, self.handler, call, send)
                group.cancel_scope.cancel()


async def answer(wire: Wire, handler: Handler, call: Call, send) -> None:
    try:
        result = await handler(call)
        response = result if isinstance(result, Response) else JSONResponse(result)
        response.headers.update(wire.headers(call.request_id, call.timing))
    except BlinkError as error:
        if isinstance(error, EngineFailure):
            log.error("request %s failed: %s", call.request_id, error.message)
        response = wire.error_response(error, call.request_id, call.timing)
    except Exception as exc:  # noqa: BLE001 - our fault: say so, log it, keep serving
        log.exception("request %s failed", call.request_id)
        failure = EngineFailure(f"internal error: {type(exc).__name__}: {exc}")
        response = wire.error_response(failure, call.request_id, call.timing)
    try:
        await response(call.request.scope, call.request.receive, send)
    except ClientDisconnect:
        pass  # gone mid-answer (ASGI 2.4 servers say so on send): nobody is left to tell


async def cancel_when_gone(receive, scope: anyio.CancelScope) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()


def not_routed(ctx, prefix: str, wire: Wire, routes: list) -> Route:
    """The route after the real ones for every path under `prefix`: 405 (with `Allow`) for a known path asked
    with another method, 404 for the rest, in the wire's own shape with a request id."""

    async def refuse(call: Call):
        method, path = call.request.method, call.request.url.path
        allowed = sorted(
            {
                m
                for r in routes
                if isinstance(r, Route) and r.methods and r.matches(call.request.scope)[0] is Match.PARTIAL
                for m in r.methods
            }
        )
        if allowed:
            raise NoRoute(
                f"{path} does not accept {method}; it takes {', '.join(allowed)}",
                status=405,
                kind="method_not_allowed",
                headers={"Allow": ", ".join(allowed)},
            )
        raise NoRoute(f"there is no route {method} {path} on this server", kind="unknown_route")

    return Route(prefix + "{rest:path}", Endpoint(ctx, wire, refuse, auth=False, read_body=False))
