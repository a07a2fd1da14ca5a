"""Request bodies, read by hand for every wire: size cap, `Content-Encoding` (zstd, gzip, deflate), JSON or
TypeSafe's multipart.

A body is read before its request takes a work place (blink.web.admission), so a client that sends slowly, or stops
halfway, holds only the bytes it has sent: `BodyBudget` bounds those bytes across every body still being read
or parsed (a request past it is refused with 529 + Retry-After), and how many bodies are decoded and parsed at once
(each bounded by `max_decoded_bytes`), so memory stays bounded whatever the clients do.

Decoding and JSON parsing are blink.web.safejson's (cost bounded by the limits, not by the input).
Not FastAPI's body validation: the cap must apply while the body streams in, compressed bodies must be decoded
first, and every error must come out in the wire's own shape (blink.web.endpoint renders it), also when the routes
are grafted onto Gradio's app, where our exception handlers and middleware don't exist.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import asynccontextmanager

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from blink.errors import BlinkError, InvalidRequest, Overloaded, PayloadTooLarge
from blink.limits import Limits
from blink.web import safejson
from blink.web.bound import Bound

BODIES_IN_FLIGHT_BYTES = 256 * 2**20
BODIES_PARSING = 4  # bodies decoded at once when they may grow (compressed, or large)
SMALL_BODY_BYTES = 2**20


class BodyBudget:
    """The bytes of request bodies held at once, across every request whose body is still arriving or being
    parsed, and how many bodies are decoded and parsed at once."""

    def __init__(self, max_bytes: int = BODIES_IN_FLIGHT_BYTES, parsing: int = BODIES_PARSING):
        self.max_bytes = max_bytes
        self.held = 0
        self.lock = threading.Lock()
        self.parsing = Bound(parsing)

    def take(self, n: int) -> None:
        with self.lock:
            if self.held + n > self.max_bytes:
                raise Overloaded(
                    f"blink is busy: the request bodies being received hold {self.held} of the {self.max_bytes} "
                    "bytes this server buffers at once. Retry after 1 s.",
                    retry_after=1,
                    kind="overloaded",
                )
            self.held += n

    def give(self, n: int) -> None:
        with self.lock:
            self.held -= n

    def state(self) -> dict:
        return {"held_bytes": self.held, "max_bytes": self.max_bytes, "parsing": self.parsing.held}


class Held:
    """The bytes one body holds in a budget, given back once, however the request ends."""

    def __init__(self, budget: BodyBudget | None):
        self.budget, self.bytes = budget, 0

    def take(self, n: int) -> None:
        if self.budget is not None:
            self.budget.take(n)
            self.bytes += n

    def give_back(self) -> None:
        if self.budget is not None and self.bytes:
            self.budget.give(self.bytes)
            self.bytes = 0


async def read_body(request: Request, limits: Limits, held: Held | None = None) -> bytes:
    """The raw body, refused with 413 as soon as it passes the cap (a 100 MB body is never held whole); each chunk
    taken from the bodies' budget as it arrives."""
    held = held or Held(None)
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limits.max_body_bytes:
        raise PayloadTooLarge(
            f"the body is {int(declared)} bytes; this server accepts at most {limits.max_body_bytes} bytes per request",
            kind="body_too_large",
        )
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limits.max_body_bytes:
            raise PayloadTooLarge(
                f"the body is over {limits.max_body_bytes} bytes, this server's limit per request",
                kind="body_too_large",
            )
        held.take(len(chunk))
        chunks.append(chunk)
    return b"".join(chunks)


def decode_body(raw: bytes, encoding: str | None, limits: Limits) -> bytes:
    """Undo `Content-Encoding` in bounded steps: time and memory proportional to the limit (no bombs)."""
    return safejson.decode(raw, encoding, limits.max_decoded_bytes)


def parse_json(data: bytes):
    """JSON with a depth limit, strict UTF-8 and no lone surrogates: each refusal a located 422."""
    return safejson.loads(data)


def parse_multipart(data: bytes, content_type: str) -> tuple[dict, dict[str, tuple[str, bytes]]]:
    """TypeSafe's multipart wire: a `request` part with the JSON, then one part per asset.
    Returns the request and the other parts as {name: (content_type, bytes)}."""
    from python_multipart.multipart import MultipartParser, parse_options_header

    _, options = parse_options_header(content_type)
    boundary = options.get(b"boundary")
    if not boundary:
        raise InvalidRequest("multipart/form-data without a boundary", loc=["body"], kind="multipart_invalid")
    parts: dict[str, tuple[str, bytes]] = {}
    current: dict = {}

    def on_part_begin():
        current.clear()
        current.update(headers={}, data=[], field=b"", value=b"")

    def on_header_field(b, s, e):
        current["field"] += b[s:e]

    def on_header_value(b, s, e):
        current["value"] += b[s:e]

    def on_header_end():
        current["headers"][current["field"].decode("latin-1").lower()] = current["value"].decode("latin-1")
        current["field"], current["value"] = b"", b""

    def on_part_data(b, s, e):
        current["data"].append(b[s:e])

    def on_part_end():
        _, disposition = parse_options_header(current["headers"].get("content-disposition", ""))
        name = disposition.get(b"name", b"").decode("utf-8", "replace")
        if name in parts:
            raise InvalidRequest(f"multipart part {name!r} appears twice", loc=["body", name], kind="multipart_invalid")
        parts[name] = (current["headers"].get("content-type", ""), b"".join(current["data"]))

    parser = MultipartParser(
        boundary,
        callbacks={
            "on_part_begin": on_part_begin,
            "on_header_field": on_header_field,
            "on_header_value": on_header_value,
            "on_header_end": on_header_end,
            "on_part_data": on_part_data,
            "on_part_end": on_part_end,
        },
    )
    try:
        parser.write(data)
        parser.finalize()
    except BlinkError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise InvalidRequest(f"invalid multipart body: {exc}", loc=["body"], kind="multipart_invalid") from None
    if "request" not in parts:
        raise InvalidRequest(
            "a multipart body needs a `request` part holding the JSON request", loc=["body", "request"], kind="missing"
        )
    body = parse_json(parts.pop("request")[1])
    return body, parts


@asynccontextmanager
async def received(request: Request, limits: Limits, budget: BodyBudget | None = None):
    """The raw body, its bytes held in the bodies' budget until the block ends (once it is parsed)."""
    held = Held(budget)
    try:
        yield await read_body(request, limits, held)
    finally:
        held.give_back()


async def parse_body(
    raw: bytes,
    headers,
    limits: Limits,
    budget: BodyBudget | None = None,
    then: Callable | None = None,
    inline_below: int = 0,
) -> tuple[object, dict, object]:
    """The body decoded and parsed (JSON, or multipart with its extra parts) in a worker thread, so that no body,
    however built, holds up the event loop (/healthz and every other request keep answering); `then(body, parts)`
    runs in the same thread hop (a route's check). A plain body under `inline_below` bytes, whose parse and check
    cost microseconds, is handled on the loop: a thread hop would cost more than the work. Returns (body, parts,
    what `then` returned)."""
    encoding, content_type = headers.get("content-encoding"), headers.get("content-type", "")

    def parse():
        body, parts = parse_request(raw, encoding, content_type, limits)
        return body, parts, (then(body, parts) if then is not None else None)

    if not encoding and len(raw) < inline_below:
        return parse()
    if budget is None or (not encoding and len(raw) <= SMALL_BODY_BYTES):  # small: decoded size is its own
        return await run_in_threadpool(parse)
    async with budget.parsing.hold_async():
        return await run_in_threadpool(parse)


def parse_request(raw: bytes, encoding: str | None, content_type: str, limits: Limits) -> tuple[object, dict]:
    data = decode_body(raw, encoding, limits)
    if content_type.lower().startswith("multipart/form-data"):
        return parse_multipart(data, content_type)
    return parse_json(data), {}
