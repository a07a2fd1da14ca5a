"""The server's routes called in this process, without HTTP: a batch row goes through the very pipeline a request
does (body caps, validation, admission, the batcher, the route's own answer and error shapes), so its answer is
what the route answers to the same request.

A row's ASGI call is made here by hand rather than through httpx's ASGI transport: a row needs its status, one
header and the body bytes, and the transport's request and response objects would cost more per row than the
rest of the way to the batcher (bench/RESULTS.md)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

import orjson

from blink.settings import Settings, knobs
from blink.web.callers import BULK

# what the route answers when it has no room now; the row is sent again after `Retry-After`, for at most
# `batch_retry_s` seconds in all (then it is written as the route's last refusal, saying so)
RETRIED = {429, 503, 529}
RETRY_KNOB = next(k for k in knobs(Settings) if k.name == "batch_retry_s")
RETRY_S = RETRY_KNOB.default


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

    def __init__(
        self,
        app,
        caller: str = "127.0.0.1",
        headers: dict | None = None,
        bulk: bool = False,
        retry_s: float = RETRY_S,
    ):
        """`caller`: the peer address the routes see (who admission counts the rows as); `headers`: sent with
        every row (the API key, where the app requires one); `bulk`: the rows are bulk work, decided in model calls
        of their own after any interactive request waiting (blink.decide.batching); `retry_s`: how long in all a
        row is sent again while the routes have no room (the `batch_retry_s` knob)."""
        self.app, self.caller, self.bulk, self.retry_s = app, caller, bulk, retry_s
        self.headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]

    async def post(self, path: str, body: bytes, give_up: Callable[[], bool] | None = None) -> Answered:
        """One request, sent again while the route says it has no room (529, 429, 503 with `Retry-After`), unless
        `give_up()` says to stop waiting (GaveUp: the row was not answered), for at most `retry_s` seconds in all:
        past them the row is answered with the route's last refusal, its message saying so and naming the knob."""
        deadline, tries = time.monotonic() + self.retry_s, 0
        while True:
            status, headers, raw = await self._call(path, body)
            if status not in RETRIED or "retry-after" not in headers:
                break
            if give_up is not None and give_up():
                raise GaveUp(path)
            left = deadline - time.monotonic()
            if left <= 0:
                return self._answered(status, headers, out_of_time(parsed_body(raw), self.retry_s), tries)
            await asyncio.sleep(min(wait_of(headers["retry-after"]), left))
            tries += 1
        return self._answered(status, headers, parsed_body(raw), tries)

    @staticmethod
    def _answered(status: int, headers: dict, body: object, tries: int) -> Answered:
        request_id = headers.get("x-request-id") or headers.get("x-typesafe-request-id")
        return Answered(status, body, request_id, tries)

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


def parsed_body(raw: bytes) -> object:
    """The route's JSON body, or its text where it is not JSON."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw.decode("utf-8", "replace")


def wait_of(retry_after: str) -> float:
    """`Retry-After`'s seconds, kept between 50 ms and 30 s (one that is not a number: 1 s)."""
    try:
        seconds = float(retry_after or 1)
    except ValueError:
        seconds = 1.0
    return max(0.05, min(seconds, 30.0))


def out_of_time(body: object, retry_s: float) -> object:
    """The route's last refusal, in its own wire's shape, its message saying the row waited `retry_s` seconds for
    room in vain and which knob sets that."""
    said = (
        f"no room for this row in {retry_s:g} s of retries, the server full all along (the `{RETRY_KNOB.name}` "
        f"knob: {RETRY_KNOB.flag}, {RETRY_KNOB.env}; or give the run more room)"
    )
    if not isinstance(body, dict) or "error" not in body:
        return {"error": f"{said}; the last refusal: {body}"}
    error = body["error"]
    if isinstance(error, dict):  # OpenAI's, Gemini's: {"error": {"message": ...}}
        return {**body, "error": {**error, "message": f"{said}; the last refusal: {error.get('message')}"}}
    out = {**body, "error": f"{said}; the last refusal: {error}"}  # System One's: {"error": str, "detail": ...}
    if isinstance(body.get("detail"), dict) and "message" in body["detail"]:
        out["detail"] = {**body["detail"], "message": out["error"]}
    return out
