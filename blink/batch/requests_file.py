"""OpenAI's batch file: input lines `{custom_id, method, url, body}` in, output lines `{id, custom_id, response,
error}` out (the shapes of OpenAI's Batch API and vLLM's `run-batch`).

Each line is read and checked on its own, so a bad line is its own error line and never fails the lines beside it:
a line that is not JSON, without a `custom_id`, with a `custom_id` seen before (the error names the earlier line),
another method than POST, a `url` this server does not answer without streaming, or past the body cap never
reaches a route; any other refusal is the route's own (its status and error body in `response`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

import orjson

from blink.api.rerank import RERANK_PATHS, SCORE_PATHS

# every POST route `serve` answers without streaming; decision routes are batched many per model call by the batcher
ROUTES = (
    "/v1/systemone",
    "/v1/decisions",
    *RERANK_PATHS,
    *SCORE_PATHS,
    "/v1/moderations",
    "/v1/completions",
    "/v1/chat/completions",
    "/v1/responses",
    "/tokenize",
    "/detokenize",
)
# the routes that generate text: they take the chat slots, so fewer of them are sent at once
GENERATING = ("/v1/chat/completions", "/v1/responses", "/v1/completions")
# a line holds its body and a short envelope (custom_id, method, url)
ENVELOPE_BYTES = 64 * 1024


@dataclass
class Row:
    """One input row: the request it makes (`path` and `body`), or why it makes none (`error`)."""

    index: int  # 0-based, in input order
    path: str | None = None
    body: bytes | None = None
    error: dict | None = None  # {"code", "message"}: refused before any route saw it
    key: Any = None  # the line's custom_id; a table's row


def lines(fh: BinaryIO, max_bytes: int) -> Iterator[tuple[bytes | None, int]]:
    """The file's lines (blank ones skipped), each with its 1-based line number; a line past `max_bytes` is read
    past without being held (None in its place)."""
    number = 0
    while True:
        raw = fh.readline(max_bytes + 1)
        if not raw:
            return
        number += 1
        if len(raw) > max_bytes and not raw.endswith(b"\n"):
            while raw and not raw.endswith(b"\n"):  # the rest of the line, dropped piece by piece
                raw = fh.readline(1 << 20)
            yield None, number
            continue
        if raw.strip():
            yield raw, number


def not_json(number: int, raw: bytes, error: orjson.JSONDecodeError) -> str:
    """Why a line is not JSON, placed within the line (the parser's own "line 2 column 1" counts the line's newline
    as a second line: one line number in a message, the file's)."""
    if "utf-8" in error.msg.lower():
        return f"line {number} is not UTF-8"
    if error.pos >= len(raw.rstrip()):
        return f"line {number} is not JSON (it ends before its JSON does: cut short?)"
    return f"line {number} is not JSON ({error.msg} at character {error.pos + 1} of the line)"


class RequestsFile:
    """The rows of one batch file, in order; remembers every `custom_id` it has read (duplicates are refused)."""

    def __init__(self, path: str, max_body_bytes: int):
        self.path, self.max_bytes = path, max_body_bytes + ENVELOPE_BYTES
        self.seen: dict[str, int] = {}  # custom_id -> the line it was first read on

    def rows(self) -> Iterator[Row]:
        with open(self.path, "rb") as fh:
            for index, (raw, number) in enumerate(lines(fh, self.max_bytes)):
                yield self.row(index, raw, number)

    def row(self, index: int, raw: bytes | None, number: int) -> Row:
        if raw is None:
            return refused(index, None, "line_too_large", f"line {number} is longer than {self.max_bytes} bytes")
        try:
            line = orjson.loads(raw)
        except orjson.JSONDecodeError as error:
            return refused(index, None, "invalid_json_line", not_json(number, raw, error))
        if not isinstance(line, dict):
            return refused(index, None, "invalid_json_line", f"line {number} is not a JSON object")
        custom_id = line.get("custom_id")
        if not isinstance(custom_id, str) or not custom_id:
            return refused(index, None, "missing_custom_id", f"line {number} has no `custom_id` (a non-empty string)")
        first = self.seen.setdefault(custom_id, number)
        if first != number:
            message = f"line {number}: custom_id {custom_id!r} was used before, on line {first}; it is answered once"
            return refused(index, custom_id, "duplicate_custom_id", message)
        return self.request(index, custom_id, line, number)

    @staticmethod
    def request(index: int, custom_id: str, line: dict, number: int) -> Row:
        method, url, body = line.get("method", "POST"), line.get("url"), line.get("body")
        if method != "POST":
            return refused(index, custom_id, "invalid_method", f"line {number}: `method` must be POST, got {method!r}")
        if url not in ROUTES:
            message = f"line {number}: `url` {url!r} is not one this batch runs; one of {', '.join(ROUTES)}"
            return refused(index, custom_id, "invalid_url", message)
        if not isinstance(body, dict):
            return refused(index, custom_id, "invalid_body", f"line {number}: `body` must be a JSON object")
        if body.get("stream"):
            message = f"line {number}: `stream` is not supported in a batch (each answer is written whole)"
            return refused(index, custom_id, "invalid_body", message)
        return Row(index, url, orjson.dumps(body), key=custom_id)


def refused(index: int, custom_id: str | None, code: str, message: str) -> Row:
    return Row(index, error={"code": code, "message": message}, key=custom_id)


def output_line(row: Row, answered) -> dict:
    """OpenAI's batch output line for a row: the route's answer (any status) in `response`, or the line's own
    refusal in `error`."""
    out = {"id": "batch_req_" + uuid.uuid4().hex, "custom_id": row.key, "response": None, "error": row.error}
    if answered is not None:
        out["response"] = {"status_code": answered.status, "request_id": answered.request_id, "body": answered.body}
    return out
