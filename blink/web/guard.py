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

Connections (the standalone server): an open socket costs a few KB, so the bound is the process's file
descriptors (`connection_cap`: the soft RLIMIT_NOFILE, raised to the hard limit, less a reserve for the model's
files and the replicas' sockets), not a small fixed number; uvicorn's `limit_concurrency` is set past it, so its
503 is never what an attacker's idle sockets earn. Work is bounded where it is spent (admission). Two caps on top,
both enforced as a connection opens (`Connections`):
- per client (by peer address), `max_connections_per_client`: a peer past it has its own oldest idle connection
  closed to make room (idle: no request in progress: a head not yet complete, slowloris, or a keep-alive wait);
  when all of its connections are busy with requests, the new one is closed;
- in all, the cap: past it, the oldest idle connection of the peer holding the most is closed.
So idle and slowloris sockets can never keep a new connection out: it takes the place of the oldest idle one.
The head deadline still closes each of them after `header_s`. Behind a reverse proxy on `serve` every
connection has the proxy's address, and the per-client cap is the proxy's. On the Space, every request comes from
Hugging Face's proxy and the protocol class is Gradio's: no per-client cap applies in the container (the proxy
holds the client connections), `tune` sets the same file-descriptor-derived bound as `limit_concurrency`, and
admission (per kind of work, keyed callers first) is what bounds work there.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from dataclasses import dataclass, field

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


@dataclass(frozen=True)
class SlowClientLimits:
    header_s: float = 10.0  # from connection (or the previous response) to a complete request head
    keep_alive_s: int = 5  # idle connection between requests
    body_idle_s: float = 10.0  # longest pause inside a request body
    body_total_s: float = 60.0  # a whole body (16 MB at ~280 KB/s)
    # open connections in all; None: from the process's file descriptors (connection_cap)
    max_connections: int | None = None
    max_connections_per_client: int = 512  # by peer address; past it the peer's oldest idle one is closed
    max_header_bytes: int = 16 * 1024
    fd_reserve: int = field(default=256)  # descriptors kept for files, logs and the replicas' sockets

    def connections(self) -> int:
        return self.max_connections if self.max_connections is not None else connection_cap(self.fd_reserve)


def connection_cap(reserve: int = 256) -> int:
    """Connections this process can hold open: its soft file-descriptor limit (raised to the hard one, at most
    1M, where the platform lets it) less `reserve`."""
    try:
        import resource
    except ImportError:  # not POSIX
        return 4096
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = min(hard if hard != resource.RLIM_INFINITY else 1 << 20, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):
            pass
    soft = 1 << 20 if soft == resource.RLIM_INFINITY else soft
    return max(64, soft - reserve)


def uvicorn_options(limits: SlowClientLimits = SlowClientLimits()) -> dict:
    """Keyword arguments for `uvicorn.run` / `uvicorn.Config` (the standalone server)."""
    cap = limits.connections()
    GuardedHttpTools.header_s = limits.header_s
    GuardedHttpTools.registry = Connections(cap, limits.max_connections_per_client)
    return {
        "http": GuardedHttpTools,
        "timeout_keep_alive": limits.keep_alive_s,
        # past our own cap (enforced as connections open): uvicorn's 503 is only a backstop
        "limit_concurrency": cap + 16,
        "h11_max_incomplete_event_size": limits.max_header_bytes,
        # who a request is from is blink's to read (blink.web.callers: `X-Forwarded-For` only from the proxies the
        # operator trusts); uvicorn's own default believes it from 127.0.0.1, which any local client could claim
        "proxy_headers": False,
    }


def tune(config, limits: SlowClientLimits = SlowClientLimits()) -> None:
    """Apply the per-connection options to an already running uvicorn server's `Config` (Gradio's)."""
    config.timeout_keep_alive = limits.keep_alive_s
    config.limit_concurrency = limits.connections()
    config.h11_max_incomplete_event_size = limits.max_header_bytes


class Connections:
    """The open connections of one server, per peer, oldest idle first; both caps enforced as one opens. Used
    from the event loop only."""

    def __init__(self, cap: int, per_client: int):
        self.cap, self.per_client = cap, per_client
        self.by_peer: dict[str, OrderedDict] = {}
        self.total = 0
        self.evicted = self.refused = 0

    def open(self, conn, peer: str) -> bool:
        """Register `conn`; False when it must be closed at once (its peer's connections are all busy)."""
        mine = self.by_peer.setdefault(peer, OrderedDict())
        if len(mine) >= self.per_client and not self._evict(mine):
            self.refused += 1
            if not mine:
                del self.by_peer[peer]
            return False
        if self.total >= self.cap:
            for _, other in sorted(self.by_peer.items(), key=lambda kv: -len(kv[1])):
                if self._evict(other):
                    break
            else:
                self.refused += 1
                return False
        mine[conn] = None
        self.total += 1
        return True

    def _evict(self, conns: OrderedDict) -> bool:
        for conn in conns:
            if not conn.busy:
                self.evicted += 1
                self.close(conn)
                conn.evict()
                return True
        return False

    def idle(self, conn) -> None:
        """`conn` finished a response: it is now the youngest idle one of its peer."""
        mine = self.by_peer.get(conn.peer)
        if mine is not None and conn in mine:
            mine.move_to_end(conn)

    def close(self, conn) -> None:
        mine = self.by_peer.get(conn.peer)
        if mine is not None and conn in mine:
            del mine[conn]
            self.total -= 1
            if not mine:
                del self.by_peer[conn.peer]

    def state(self) -> dict:
        return {"open": self.total, "cap": self.cap, "per_client": self.per_client, "peers": len(self.by_peer)}


class GuardedHttpTools(HttpToolsProtocol):
    """httptools with a deadline for the request head (uvicorn has none)."""

    header_s: float = SlowClientLimits.header_s
    registry: Connections | None = None  # set by uvicorn_options

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_timer = None
        self.busy = False
        self.peer = (self.client or ("?",))[0]
        if self.registry is not None and not self.registry.open(self, self.peer):
            self.transport.close()
            return
        self._arm()

    def evict(self) -> None:
        """Closed to make room for a new connection (it was idle: no request in progress)."""
        self._disarm()
        if not self.transport.is_closing():
            self.transport.close()

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
        self.busy = True
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # the keep-alive timer (uvicorn's) covers the idle time; ours covers a next request's slow head
        self._disarm()
        self.busy = False
        if self.registry is not None:
            self.registry.idle(self)

    def connection_lost(self, exc) -> None:
        self._disarm()
        if self.registry is not None:
            self.registry.close(self)
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
