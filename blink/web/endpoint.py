"""The request pipeline of every blink route, written once: a route declares what it is, not how to serve it.

`Endpoint(ctx, wire, handler, body=Body(...), check=fn, admit=kind)` is the ASGI app of one route. In order:
1. a request id and the API key;
2. the body, read under its deadlines (blink.web.guard) and its caps *without* holding a work place: the bytes of
   bodies in flight are bounded by the server's `BodyBudget` (blink.web.bodies), so stalled or trickling bodies
   hold bytes, never the places normal requests need;
3. `check(call)` in a worker thread: everything refusable without the model (the body's shape, its fields, images
   on a text-only model) is refused here, at once, whatever the load;
4. admission to the route's kind of work (blink.web.admission): a place (or `units(checked)` places, for a request
   of several decisions), or 529 + Retry-After;
5. `handler(call)`: the capped token count (under the ticket's preparing bound) and the work, answered as a dict
   (JSON, 200) or a Response as it is.
A BlinkError is rendered in the wire's own shape; anything else is logged and answered 500 in that shape.
Every response carries the request id (under the wire's header names) and `server-timing`.

Routes are plain ASGI apps, not FastAPI dependencies or exception handlers, because the Space grafts them
onto Gradio's app where our handlers and middleware don't exist. For the same reason unknown paths and
methods under /v1/ are answered by routes too (`not_routed`, listed after the real ones).

Once the body is read, the client's disconnect ends the work of a route that holds a place (`admit`): its wait
for a place, its queued request (dropped uncomputed) or its handler, and the place is free at once; a decision
already in a pass finishes there and its answer is dropped. `cancel_on_disconnect=True` (chat) does the same
for a route without `admit`. It cancels the handler and the response alike, as vLLM's `with_cancellation`
does, so streamed and non-streamed chat stop the same way (Starlette's StreamingResponse may notice first under
ASGI 2.3; it cancels the same scope of work). What a handler holds for the exchange (`call.held`: a chat slot,
a generator) is let go when it ends, however it ends.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Match, Route

from blink.errors import BlinkError, EngineFailure, InvalidRequest, NoRoute, Unauthorized
from blink.web import metrics
from blink.web.admission import KEYED, units_of
from blink.web.bodies import parse_body, received
from blink.web.callers import with_lane

log = logging.getLogger("blink")


def unauthorized(key_headers: tuple[str, ...] = ()) -> str:
    """The 401's message: every header the route reads the key from (`key_headers`), then the bearer token."""
    other = "".join(f"{name}: <key> or " for name in key_headers)
    return f"missing or invalid API key: send {other}Authorization: Bearer <key>"


# a decision body this small is parsed and checked in microseconds: on the event loop, not in a thread
CHEAP_CHECK_BYTES = 16 * 1024


def new_request_id() -> str:
    return "req_" + uuid.uuid4().hex


@dataclass
class Timing:
    """Phases of one request, for the `server-timing` header (milliseconds)."""

    start: float = field(default_factory=time.perf_counter)
    phases: dict = field(default_factory=dict)

    def add(self, name: str, seconds: float) -> None:
        self.phases[name] = self.phases.get(name, 0.0) + seconds * 1000

    def header(self) -> str:
        parts = [f"{name};dur={ms:.2f}" for name, ms in self.phases.items()]
        parts.append(f"total;dur={(time.perf_counter() - self.start) * 1000:.2f}")
        return ", ".join(parts)


@dataclass(frozen=True)
class Wire:
    """How one wire family answers: `render(error) -> (status, body)` and the headers that carry the id."""

    render: Callable[[BlinkError], tuple[int, dict]]
    id_headers: tuple[str, ...] = ("x-typesafe-request-id",)

    def headers(self, request_id: str, timing: Timing) -> dict:
        return {**{name: request_id for name in self.id_headers}, "server-timing": timing.header()}

    def error_response(self, error: BlinkError, request_id: str, timing: Timing) -> Response:
        status, body = self.render(error)
        metrics.refused(status, error.kind)
        headers = {**self.headers(request_id, timing), **error.headers}
        if isinstance(error, Unauthorized):
            headers["WWW-Authenticate"] = "Bearer"
        return AsciiJSONResponse(body, status, headers)


class FastJSONResponse(JSONResponse):
    """A route's answer as JSON, by orjson: the same bytes as Starlette's (compact, UTF-8, keys in order) except
    that a float Python writes with an exponent may be written another way (1.5e-7 for 1.5e-07, 0.00001 for 1e-05),
    the same number to every JSON parser. It costs ~45 µs where `json.dumps` costs ~110 µs for a decision's answer,
    with the caches cold after a pass (bench/RESULTS.md). What orjson refuses (an integer past 64 bits that a client
    sent and a route echoes, a float's subclass) is written by Starlette's `json.dumps`. No answer holds NaN or an
    infinity, which orjson would write as null: bodies refuse them (blink.web.safejson), answers refuse non-finite
    logits, log-probabilities leave -inf out."""

    def render(self, content) -> bytes:
        try:
            return orjson.dumps(content)
        except TypeError:  # orjson.JSONEncodeError is one
            return super().render(content)


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
    checked: Any = None  # what the route's `check` made of the body (a parsed request)
    arrival: Any = None  # what the route counts of the request while it is on its way (Endpoint's `arriving`)
    ticket: Any = None  # the admission place held for the whole exchange (blink.web.admission.Ticket)
    units: int = 1  # the places it holds: one per decision it asks for (Endpoint's `units`)
    kind: str | None = None  # the kind of work it is admitted to (Endpoint's `admit`, or what it says of the request)
    wire: Wire | None = None  # the wire this request speaks, where its route serves two (set by `check`)


Handler = Callable[[Call], Awaitable["dict | Response"]]


@dataclass(frozen=True)
class Body:
    """A route's body: JSON, and TypeSafe's multipart too when `multipart`. `what` names the requests in the
    refusal of a multipart body to a JSON-only route."""

    what: str = "requests"
    multipart: bool = False

    def refuse_parts(self, parts: dict) -> None:
        if parts and not self.multipart:
            raise InvalidRequest(
                f"send {self.what} as JSON (application/json), not multipart", loc=["body"], kind="unsupported_media"
            )


class Endpoint:
    """The ASGI app of one route (an object, not a function, so Starlette hands it the raw ASGI call)."""

    def __init__(
        self,
        ctx,
        wire: Wire,
        handler: Handler,
        *,
        auth: bool = True,
        body: Body | None = None,
        check: Callable[[Call], Any] | None = None,
        admit: str | Callable[[Any], str] | None = None,
        cancel_on_disconnect: bool = False,
        inline_below: int = 0,
        arriving: Callable[[], Any] | None = None,
        units: Callable[[Any], int] | None = None,
        key_headers: tuple[str, ...] = (),
    ):
        """`body`: None for routes that read none; `check(call)`: the route's validation, before admission;
        `admit`: the kind of work it does (blink.web.admission), or a function of the checked request that says
        which (a completion request that only scores its prompts is decision work), None for routes that spend no
        model time;
        `inline_below`: a plain body under these bytes is parsed and checked on the event loop (a check that costs
        microseconds for such a body: a thread hop would cost more); `arriving()`: called as a request with the
        key is all here (its body read), before it is parsed; what it returns (`call.arrival`: a decision counted
        on its way to the batcher, blink.decide.batching.OnItsWay) is released as the exchange ends unless its work
        did so; `units(checked)`: the places of `admit` the request holds, one per decision it asks for (default
        one); `key_headers`: headers that may carry the API key itself, beside `Authorization: Bearer` (Gemini's
        `x-goog-api-key`)."""
        self.ctx, self.wire, self.handler = ctx, wire, handler
        self.auth, self.body, self.check, self.admit = auth, body, check, admit
        self.cancel_on_disconnect, self.inline_below, self.arriving = cancel_on_disconnect, inline_below, arriving
        self.units = units or 1
        self.key_headers = key_headers

    async def _read(self, call: Call) -> None:
        """Steps 1-3 of the pipeline: the key, the body read, parsed and checked in one thread hop."""
        ctx, request = self.ctx, call.request
        if self.auth and not self._key_shown(request):
            raise Unauthorized(unauthorized(self.key_headers))
        if self.body is not None:
            started = time.perf_counter()
            async with received(request, ctx.limits, ctx.body_budget) as raw:
                call.timing.add("body", time.perf_counter() - started)  # the client's bytes arriving
                self._arrived(call)
                call.body, call.parts, call.checked = await parse_body(  # parsed and checked in one thread hop
                    raw,
                    request.headers,
                    ctx.limits,
                    ctx.body_budget,
                    then=lambda body, parts: self._check(call, body, parts),
                    inline_below=self.inline_below,
                )
        elif self.check is not None:
            self._arrived(call)
            call.checked = await run_in_threadpool(self.check, call)
        if self.admit:  # more places than the gate has would never all free: refused with the check's refusals
            call.kind = self.admit(call.checked) if callable(self.admit) else self.admit
            call.units = units_of(self.units, call.checked)
            self.ctx.admission.gate(call.kind).check_units(call.units)

    def _key_shown(self, request: Request) -> bool:
        """The API key as a bearer token, or in one of the route's `key_headers` (any, when no key is set)."""
        key, headers = self.ctx.auth, request.headers
        if key.allows(headers.get("authorization")):
            return True
        return any(key.matches(headers.get(name)) for name in self.key_headers)

    def _arrived(self, call: Call) -> None:
        """The request is all here: the route counts it from now (before any thread hop) until the exchange ends.
        Not earlier: a client sending its body slowly would hold every batching window open."""
        if self.arriving is not None:
            call.arrival = self.arriving()
            call.held.callback(call.arrival.release)

    def _check(self, call: Call, body, parts: dict):
        call.body, call.parts = body, parts
        self.body.refuse_parts(parts)
        return self.check(call) if self.check is not None else None

    async def __call__(self, scope, receive, send) -> None:
        ctx, wire = self.ctx, self.wire
        request = Request(scope, receive)
        async with AsyncExitStack() as held:
            call = Call(request, new_request_id(), Timing(), held, caller=with_lane(ctx.caller_of(request), request))
            try:
                await self._read(call)
            except ClientDisconnect:
                return  # nobody to answer
            except BlinkError as error:
                await (call.wire or wire).error_response(error, call.request_id, call.timing)(scope, receive, send)
                return
            if not (self.cancel_on_disconnect or self.admit):
                await answer(call.wire or wire, self.handler, call, send)
                return
            # work that holds a place: the client leaving ends it, waiting or running, and the place is free at
            # once (a decision already in a pass finishes there; its answer is dropped)
            await until_gone(self._admitted(call, scope, receive, send), receive)

    async def _admitted(self, call: Call, scope, receive, send) -> None:
        """Step 4 (a place, or 529), then the work."""
        wire = call.wire or self.wire
        if self.admit:  # API callers passed the key (or none is set): keyed
            waited = time.perf_counter()
            try:
                admitted = self.ctx.admission.admit(call.kind, KEYED, None, units=call.units, caller=call.caller)
                _, call.ticket = await call.held.enter_async_context(admitted)
            except BlinkError as error:
                metrics.ADMISSION_WAIT.labels(call.kind).observe(time.perf_counter() - waited)
                await wire.error_response(error, call.request_id, call.timing)(scope, receive, send)
                return
            metrics.ADMISSION_WAIT.labels(call.kind).observe(time.perf_counter() - waited)
        await answer(wire, self.handler, call, send)
        metrics.E2E.labels(self.ctx.served_name).observe(time.perf_counter() - call.timing.start)


async def answer(wire: Wire, handler: Handler, call: Call, send) -> None:
    try:
        result = await handler(call)
        response = result if isinstance(result, Response) else FastJSONResponse(result)
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


async def until_gone(work: Awaitable[None], receive) -> None:
    """`work`, run in this task and cancelled there if the client disconnects first (then it ends quietly).

    A plain asyncio task watches `receive` rather than an anyio task group: the group costs ~50 µs more on every
    request, most of a decision's time outside the model (bench/RESULTS.md), for the same effect here."""
    task = asyncio.current_task()
    watcher = asyncio.get_running_loop().create_task(cancel_when_gone(receive, task))
    try:
        await work
    except asyncio.CancelledError:
        if not fired(watcher):
            raise  # cancelled by someone else (the server stopping): theirs to handle
    finally:
        watcher.cancel()
    if fired(watcher):
        task.uncancel()  # ours: the client left, nobody is waiting for the answer


def fired(watcher: asyncio.Task) -> bool:
    return watcher.done() and not watcher.cancelled()


async def cancel_when_gone(receive, task: asyncio.Task) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    task.cancel()


def not_routed(ctx, prefix: str, wire: Wire, routes: list, *, redirect_slashes: bool = False) -> Route:
    """The route after the real ones for every path under `prefix`: 405 (with `Allow`) for a known path asked
    with another method, 404 for the rest, in the wire's own shape with a request id. `redirect_slashes`: a path
    that names a route but for its trailing slash is redirected there (307), as Starlette's router does when no
    route matches (`/mcp/` -> `/mcp`), which a catch-all would otherwise end."""

    async def refuse(call: Call):
        method, path = call.request.method, call.request.url.path
        if redirect_slashes and path != "/":
            other = path[:-1] if path.endswith("/") else path + "/"
            scope = {**call.request.scope, "path": other}
            if any(isinstance(r, Route) and r.methods and r.matches(scope)[0] is not Match.NONE for r in routes):
                return RedirectResponse(call.request.url.replace(path=other), status_code=307)
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

    return Route(prefix + "{rest:path}", Endpoint(ctx, wire, refuse, auth=False))
