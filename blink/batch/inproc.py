"""The server's routes called in this process, without HTTP: a batch row goes through the very pipeline a request
does (body caps, validation, admission, the batcher, the route's own answer and error shapes), so its answer is
what the route answers to the same request.

A row's ASGI call is made here by hand rather than through httpx's ASGI transport: a row needs its status, one
header and the body bytes, and the transport's request and response objects would cost more per row than the
rest of the way to the batcher (bench/RESULTS.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import orjson

from blink.web.callers import BULK

# what the route answers when it has no room now; the row is sent again after `Retry-After`, never written as an error
RETRIED = {429, 503, 529}
MAX_TRIES = 1000


class GaveUp(Exception):
    """The caller stopped waiting for room (its batch was cancelled or expired): the row was not answered."""


@dataclass
class Answered:
    status: int
    body: object  # the parsed JSON body (the raw text where it is not JSON)
    request_id: str | None
    retries: int = 0


class InProcess:
    """POSTs to one ASGI app in this process."""

    def __init__(self, app, caller: str = "127.0.0.1", headers: dict | None = None, bulk: bool = False):
        """`caller`: the peer address the routes see (who admission counts the rows as); `headers`: sent with
        every row (the API key, where the app requires one); `bulk`: the rows are bulk work, decided in model calls
        of their own after any interactive request waiting (blink.decide.batching)."""
        self.app, self.caller, self.bulk = app, caller, bulk
        self.headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]

    async def post(self, path: str, body: bytes, give_up: Callable[[], bool] | None = None) -> Answered:
        """One request, sent again while the route says it has no room (529, 429, 503 with `Retry-After`), unless
        `give_up()` says to stop waiting (GaveUp: the row was not answered)."""
        for tries in range(MAX_TRIES):
            status, headers, raw = await self._call(path, body)
            if status not in RETRIED or "retry-after" not in headers or tries == MAX_TRIES - 1:
                break
            if give_up is not None and give_up():
                raise GaveUp(path)
            await asyncio.sleep(max(0.05, min(float(headers["retry-after"] or 1), 30.0)))
        try:
            parsed = orjson.loads(raw)
        except orjson.JSONDecodeError:
            parsed = raw.decode("utf-8", "replace")
        request_id = headers.get("x-request-id") or headers.get("x-typesafe-request-id")
        return Answered(status, parsed, request_id, tries)

    async def _call(self, path: str, body: bytes) -> tuple[int, dict, bytes]:
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.4"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "root_path": "",
            "query_string": b"",
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *self.headers,
            ],
            "client": (self.caller, 0),
            "server": ("run-batch", 0),
            "state": {},
        }
        if self.bulk:
            scope[BULK] = True
        done = asyncio.Event()
        sent = [False]
        status, headers, chunks = [0], {}, []

        async def receive():
            if not sent[0]:
                sent[0] = True
                return {"type": "http.request", "body": body, "more_body": False}
            await done.wait()  # nobody leaves: the route's disconnect watch waits until the answer is out
            return {"type": "http.disconnect"}

        async def send(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                headers.update((k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in message["headers"])
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
                if not message.get("more_body", False):
                    done.set()

        try:
            await self.app(scope, receive, send)
        finally:
            done.set()
        return status[0], headers, b"".join(chunks)
