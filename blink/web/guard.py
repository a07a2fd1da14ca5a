"""Slow clients: no connection may hold the server's memory or a socket longer than the timeouts below.

What uvicorn 0.54 offers itself (`uvicorn_options`): `timeout_keep_alive` (an idle connection *after* a
response), `limit_concurrency` (past it, new requests get 503 at once: a bound on open connections and running
tasks), `h11_max_incomplete_event_size` (header bytes, h11 only; httptools' parser keeps its own bound). What it
does not: a deadline for the request head (a fresh connection that sends nothing, or headers one line at a
time, slowloris, is kept forever) and for the body (a client that stops mid-body holds what it sent). Those
are written here:

- `GuardedHttpTools`: uvicorn's httptools protocol with a header deadline, armed when a connection opens and
  when each request begins, cancelled when its head is complete; past it the connection is closed.
- `BodyDeadline`: pure ASGI middleware; a request body must keep arriving (`idle_s` between chunks) and be
  whole within `total_s`, else the client gets 408 and the connection is closed. Our routes read bodies through
  it, so the memory a stalled upload holds is freed at the deadline.

On the Space, Gradio starts uvicorn itself with only host, port, log level and TLS (gradio/http_server.py):
none of these options reach it through `launch()`. `tune(config)` sets the per-connection ones on the
running server's config (`demo.server.config`; uvicorn reads them as each connection is made), and
`BodyDeadline` wraps Gradio's app as FastAPI middleware (`launch(app_kwargs={"middleware": [...]})`, which Gradio
hands to its FastAPI app). The header deadline needs the protocol class, which
uvicorn binds at startup, so on the Space the head of a request is left to Hugging Face's proxy, which
terminates every client connection in front of the container (its own timeouts are not documented).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


@dataclass(frozen=True)
class SlowClientLimits:
    header_s: float = 10.0  # from connection (or the previous response) to a complete request head
    keep_alive_s: int = 5  # idle connection between requests
    body_idle_s: float = 10.0  # longest pause inside a request body
    body_total_s: float = 60.0  # a whole body (16 MB at ~280 KB/s)
    max_connections: int = 256  # open connections and running tasks; past it new requests get 503
    max_header_bytes: int = 16 * 1024


def uvicorn_options(limits: SlowClientLimits = SlowClientLimits()) -> dict:
    """Keyword arguments for `uvicorn.run` / `uvicorn.Config` (the standalone server)."""
    GuardedHttpTools.header_s = limits.header_s
    return {
        "http": GuardedHttpTools,
        "timeout_keep_alive": limits.keep_alive_s,
        "limit_concurrency": limits.max_connections,
        "h11_max_incomplete_event_size": limits.max_header_bytes,
    }


def tune(config, limits: SlowClientLimits = SlowClientLimits()) -> None:
    """Apply the per-connection options to an already running uvicorn server's `Config` (Gradio's)."""
    config.timeout_keep_alive = limits.keep_alive_s
    config.limit_concurrency = limits.max_connections
    config.h11_max_incomplete_event_size = limits.max_header_bytes


class GuardedHttpTools(HttpToolsProtocol):
    """httptools with a deadline for the request head (uvicorn has none)."""

    header_s: float = SlowClientLimits.header_s

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_timer = None
        self._arm()

    def _arm(self) -> None:
        if getattr(self, "_head_timer", None) is None:
            self._head_timer = self.loop.call_later(self.header_s, self._head_too_slow)

    def _disarm(self) -> None:
        if getattr(self, "_head_timer", None) is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_too_slow(self) -> None:
        self._head_timer = None
        if not self.transport.is_closing():
            self.transport.close()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm()

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # the keep-alive timer (uvicorn's) covers the idle time; ours covers a next request's slow head
        self._disarm()

    def connection_lost(self, exc) -> None:
        self._disarm()
        super().connection_lost(exc)


TIMEOUT_BODY = (
    b'{"error":"the request body stopped arriving: send it whole within the time limit",'
    b'"detail":{"error_type":"request_timeout","message":"the request body stopped arriving"}}'
)


class BodyDeadline:
    """ASGI middleware: a request body that pauses longer than `idle_s`, or takes longer than `total_s`, ends
    in 408 (connection closed); the app sees the client as gone, and anything it sends after is dropped."""

    def __init__(
        self, app, idle_s: float = SlowClientLimits.body_idle_s, total_s: float = SlowClientLimits.body_total_s
    ):
        self.app, self.idle_s, self.total_s = app, idle_s, total_s

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.total_s
        state = {"body_done": False, "timed_out": False, "started": False}

        async def guarded_receive():
            if state["timed_out"]:
                return {"type": "http.disconnect"}
            if state["body_done"]:
                return await receive()  # after the body: waiting for a disconnect is not the client's delay
            wait = min(self.idle_s, deadline - loop.time())
            try:
                message = await asyncio.wait_for(receive(), max(wait, 0.001))
            except TimeoutError:
                state["timed_out"] = True
                if not state["started"]:
                    state["started"] = True
                    await send(
                        {
                            "type": "http.response.start",
                            "status": 408,
                            "headers": [
                                (b"content-type", b"application/json"),
                                (b"connection", b"close"),
                                (b"content-length", str(len(TIMEOUT_BODY)).encode()),
                            ],
                        }
                    )
                    await send({"type": "http.response.body", "body": TIMEOUT_BODY})
                return {"type": "http.disconnect"}
            if message["type"] == "http.request" and not message.get("more_body", False):
                state["body_done"] = True
            return message

        async def guarded_send(message):
            if state["timed_out"]:
                return  # the 408 is the answer
            if message["type"] == "http.response.start":
                state["started"] = True
            await send(message)

        await self.app(scope, guarded_receive, guarded_send)


class ScrubQuery(logging.Filter):
    """Drops the query string from uvicorn's access-log lines: a key sent as `?api_key=` must never be written
    down. Install with `logging.getLogger("uvicorn.access").addFilter(ScrubQuery())`."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str) and "?" in args[2]:
            record.args = (*args[:2], args[2].split("?", 1)[0] + "?[query removed]", *args[3:])
        return True
