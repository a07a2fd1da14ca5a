"""Request bodies, read by hand for every wire: size cap, `Content-Encoding` (zstd, gzip, deflate), JSON or
TypeSafe's multipart.

Not FastAPI's body validation: the cap must apply while the body streams in, compressed bodies must be decoded
first, and every error must come out in the wire's own shape (blink.http renders it), also when the routes
are grafted onto Gradio's app, where our exception handlers and middleware don't exist.
"""

from __future__ import annotations

import json
import zlib

from starlette.requests import Request

from .errors import BlinkError, InvalidRequest, PayloadTooLarge
from .limits import Limits


async def read_body(request: Request, limits: Limits) -> bytes:
    """The raw body, refused with 413 as soon as it passes the cap (a 100 MB body is never held whole)."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limits.max_body_bytes:
        raise PayloadTooLarge(f"the body is {int(declared)} bytes; this server accepts at most "
                              f"{limits.max_body_bytes} bytes per request", kind="body_too_large")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limits.max_body_bytes:
            raise PayloadTooLarge(f"the body is over {limits.max_body_bytes} bytes, this server's limit per request",
                                  kind="body_too_large")
        chunks.append(chunk)
    return b"".join(chunks)


def decode_body(raw: bytes, encoding: str | None, limits: Limits) -> bytes:
    """Undo `Content-Encoding` (zstd, gzip, deflate), with the decoded size capped (no decompression bombs)."""
    encoding = (encoding or "identity").strip().lower()
    if encoding in ("", "identity"):
        return raw
    cap = limits.max_decoded_bytes
    try:
        if encoding == "zstd":
            import zstandard

            reader = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
            data = reader.read(cap + 1)
        elif encoding in ("gzip", "x-gzip", "deflate"):
            # gzip: wbits 16+; deflate: zlib-wrapped per RFC 9110, raw deflate accepted as clients do send it
            wbits = 16 + zlib.MAX_WBITS if "gzip" in encoding else (zlib.MAX_WBITS if raw[:1] == b"\x78"
                                                                    else -zlib.MAX_WBITS)
            inflater = zlib.decompressobj(wbits)
            data = inflater.decompress(raw, cap + 1)
            if len(data) <= cap and not inflater.eof:
                raise ValueError("truncated stream")
        else:
            raise BlinkError(f"unsupported Content-Encoding {encoding!r}: send zstd, gzip, deflate or none",
                             status=415, kind="unsupported_encoding")
    except BlinkError:
        raise
    except Exception as exc:  # noqa: BLE001 - any decoder failure is the client's data
        raise BlinkError(f"the body is not valid {encoding} data: {exc}", status=400, kind="invalid_encoding") from None
    if len(data) > cap:
        raise PayloadTooLarge(f"the body decompresses to more than {cap} bytes, this server's limit",
                              kind="body_too_large")
    return data


def parse_json(data: bytes):
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        pos = getattr(exc, "pos", 0)
        raise InvalidRequest(f"the body is not valid JSON: {exc}", loc=["body", pos], kind="json_invalid") from None


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

    parser = MultipartParser(boundary, callbacks={
        "on_part_begin": on_part_begin, "on_header_field": on_header_field, "on_header_value": on_header_value,
        "on_header_end": on_header_end, "on_part_data": on_part_data, "on_part_end": on_part_end})
    try:
        parser.write(data)
        parser.finalize()
    except BlinkError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise InvalidRequest(f"invalid multipart body: {exc}", loc=["body"], kind="multipart_invalid") from None
    if "request" not in parts:
        raise InvalidRequest("a multipart body needs a `request` part holding the JSON request",
                             loc=["body", "request"], kind="missing")
    body = parse_json(parts.pop("request")[1])
    return body, parts


async def read_request(request: Request, limits: Limits) -> tuple[object, dict]:
    """The decoded request body (JSON, or multipart with its extra parts)."""
    raw = await read_body(request, limits)
    data = decode_body(raw, request.headers.get("content-encoding"), limits)
    content_type = request.headers.get("content-type", "")
    if content_type.lower().startswith("multipart/form-data"):
        return parse_multipart(data, content_type)
    return parse_json(data), {}
