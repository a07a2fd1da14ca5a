"""Request bodies, read by hand for every wire: size cap, `Content-Encoding` (zstd, gzip, deflate), JSON or
TypeSafe's multipart.

Decoding and JSON parsing are blink.safejson's (cost bounded by the limits, not by the input).
Not FastAPI's body validation: the cap must apply while the body streams in, compressed bodies must be decoded
first, and every error must come out in the wire's own shape (blink.http renders it), also when the routes
are grafted onto Gradio's app, where our exception handlers and middleware don't exist.
"""

from __future__ import annotations

from starlette.requests import Request

from . import safejson
from .errors import BlinkError, InvalidRequest, PayloadTooLarge
from .limits import Limits


async def read_body(request: Request, limits: Limits) -> bytes:
    """The raw body, refused with 413 as soon as it passes the cap (a 100 MB body is never held whole)."""
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


async def read_request(request: Request, limits: Limits) -> tuple[object, dict]:
    """The decoded request body (JSON, or multipart with its extra parts), decoded and parsed in a worker thread
    so that no body, however built, holds up the event loop (/healthz and every other request keep answering)."""
    from starlette.concurrency import run_in_threadpool

    raw = await read_body(request, limits)
    return await run_in_threadpool(
        parse_request, raw, request.headers.get("content-encoding"), request.headers.get("content-type", ""), limits
    )


def parse_request(raw: bytes, encoding: str | None, content_type: str, limits: Limits) -> tuple[object, dict]:
    data = decode_body(raw, encoding, limits)
    if content_type.lower().startswith("multipart/form-data"):
        return parse_multipart(data, content_type)
    return parse_json(data), {}
