"""A multipart upload streamed to disk as it arrives (python-multipart's push parser): the file part is written
piece by piece to a path, never held in memory, and refused as soon as it passes its cap; the other parts are short
text fields, each capped too. Used by `POST /v1/files` (blink.api.files), whose files have their own size cap, not
the request-body caps.

What the form may hold is declared: a part with another name, a second file, a field past its cap or a body that
is not multipart is a 400 that says what to send.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import Request

from blink.errors import InvalidRequest, PayloadTooLarge

MAX_FIELD_BYTES = 1024


@dataclass
class Upload:
    fields: dict = field(default_factory=dict)
    filename: str | None = None
    bytes: int = 0


def bad(message: str, kind: str = "invalid_multipart") -> InvalidRequest:
    return InvalidRequest(message, loc=["body"], kind=kind)


class _Parts:
    """python-multipart's callbacks: each part's headers, then its bytes to a field or to the file."""

    def __init__(self, path: Path, upload: Upload, names: tuple[str, ...], max_file_bytes: int, room: Callable):
        self.path, self.upload, self.names, self.max_file_bytes, self.room = path, upload, names, max_file_bytes, room
        self.header, self.headers, self.part, self.out = b"", {}, None, None

    def callbacks(self) -> dict:
        return {
            "on_part_begin": self.begin,
            "on_header_field": lambda d, s, e: setattr(self, "header", self.header + d[s:e]),
            "on_header_value": self.value,
            "on_header_end": lambda: setattr(self, "header", b""),
            "on_headers_finished": self.headers_finished,
            "on_part_data": self.data,
            "on_part_end": self.end,
        }

    def begin(self) -> None:
        self.headers, self.part = {}, None

    def value(self, data: bytes, start: int, end: int) -> None:
        name = self.header.lower()
        self.headers[name] = self.headers.get(name, b"") + data[start:end]

    def headers_finished(self) -> None:
        _, options = parse_options_header(self.headers.get(b"content-disposition", b""))
        name = options.get(b"name", b"").decode("utf-8", "replace")
        if b"filename" in options:
            if name != "file" or self.out is not None or self.upload.filename is not None:
                raise bad("send one file, as the form's `file` part")
            self.upload.filename = options[b"filename"].decode("utf-8", "replace")[:255] or "upload.jsonl"
            self.out = open(self.path, "wb")  # noqa: SIM115 - closed at the part's end, or by `close`
            self.part = "file"
        elif name in self.names and name not in self.upload.fields:
            self.part, self.upload.fields[name] = name, b""
        else:
            allowed = ", ".join(["file", *self.names])
            raise bad(f"the form has a part {name!r} this route does not read (once each: {allowed})", "unknown_field")

    def data(self, data: bytes, start: int, end: int) -> None:
        piece = data[start:end]
        if self.part == "file":
            self.upload.bytes += len(piece)
            if self.upload.bytes > self.max_file_bytes:
                raise PayloadTooLarge(
                    f"the file is larger than this server's max_upload_bytes ({self.max_file_bytes} bytes)",
                    kind="file_too_large",
                )
            self.room(len(piece))
            self.out.write(piece)
        else:
            value = self.upload.fields[self.part] + piece
            if len(value) > MAX_FIELD_BYTES:
                raise bad(f"the form's `{self.part}` is longer than {MAX_FIELD_BYTES} bytes")
            self.upload.fields[self.part] = value

    def end(self) -> None:
        if self.part == "file":
            self.out.close()

    def close(self) -> None:
        if self.out is not None:
            self.out.close()


async def receive(
    request: Request, path: Path, names: tuple[str, ...], max_file_bytes: int, room: Callable[[int], None]
) -> Upload:
    """The form's file written to `path` and its text fields `names` (decoded); `room(n)` is told each piece's bytes
    before it is written and raises to refuse it (a quota). The caller removes `path` if this raises."""
    kind, options = parse_options_header(request.headers.get("content-type", ""))
    boundary = options.get(b"boundary")
    if kind != b"multipart/form-data" or not boundary:
        raise bad("send the file as multipart/form-data with a `file` part and a `purpose` field", "unsupported_media")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_file_bytes + 64 * 1024:  # the form's fields and boundaries
        raise PayloadTooLarge(
            f"the file is larger than this server's max_upload_bytes ({max_file_bytes} bytes)", kind="file_too_large"
        )
    upload = Upload()
    parts = _Parts(path, upload, names, max_file_bytes, room)
    parser = MultipartParser(boundary, parts.callbacks())
    try:
        async for chunk in request.stream():
            if chunk:
                await asyncio.to_thread(parser.write, chunk)  # the disk's time in a thread, not the event loop's
        parser.finalize()
    except (InvalidRequest, PayloadTooLarge):
        raise
    except ValueError as error:  # python-multipart's parse errors are ValueErrors
        raise bad(f"the multipart body could not be read: {error}") from None
    finally:
        parts.close()
    try:
        upload.fields = {k: v.decode("utf-8") for k, v in upload.fields.items()}
    except UnicodeDecodeError:
        raise bad("the form's fields must be UTF-8 text") from None
    return upload
