"""The Responses wire's events: one streamed response, `response.created`, `response.in_progress`, then per item
`response.output_item.added`, its deltas (`response.reasoning_text.delta`, `response.content_part.added` /
`response.output_text.delta` / `.done`, `response.function_call_arguments.delta` / `.done`),
`response.output_item.done`, and `response.completed` (`response.incomplete` when the output budget ran out).
A failure after the headers is an `error` event, then `response.failed`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from blink.api.openai.generation import Calls, Content, Reasoning, Reply, as_blink_error, sse
from blink.api.openai.protocol import render
from blink.api.openai.responses_output import (
    Shape,
    call_item,
    message_item,
    reasoning_item,
    reasoning_tokens,
    status_of,
    text_part,
)
from blink.errors import EngineFailure
from blink.generate.chat_engine import ChatEnd
from blink.web.streams import KEEPALIVE

log = logging.getLogger("blink")


class _Events:
    """The numbered events of one streamed response, and the items it has made so far."""

    def __init__(self):
        self.number = 0
        self.output: list[dict] = []

    def __call__(self, kind: str, **fields) -> str:
        event = {"type": kind, "sequence_number": self.number, **fields}
        self.number += 1
        return sse(event, kind)


class ResponseStream:
    """The events of one streamed response. At most one reasoning item and one message are open at a time, their
    text still coming; an item is done before the next is added (`close_open`); function calls are added whole.
    Each method returns the event lines it made, numbered in order."""

    def __init__(self, shape: Shape):
        self.shape = shape
        self.emit = _Events()
        self.output = self.emit.output
        self.reasoning: dict | None = None  # the open reasoning item
        self.message: dict | None = None  # the open message
        self.thought: list[str] = []
        self.text: list[str] = []
        self.logprobs: list = []
        self.truncated = False  # the last call was cut off by the token limit

    def start(self) -> list[str]:
        return [
            self.emit("response.created", response=self.shape.body("in_progress", [])),
            self.emit("response.in_progress", response=self.shape.body("in_progress", [])),
        ]

    def on(self, piece) -> list[str]:
        """The lines one piece of the reply makes."""
        if piece is KEEPALIVE:
            return [": keep-alive\n\n"]
        if isinstance(piece, Reasoning):
            return self.add_reasoning(piece.text)
        if isinstance(piece, Content):
            return self.add_text(piece.text, piece.logprobs or [])
        if isinstance(piece, Calls):
            self.truncated = piece.truncated
            return self.close_open() + self.add_calls(piece.calls)
        if isinstance(piece, ChatEnd):
            return self.finish(piece)
        return []

    def open_reasoning(self) -> list[str]:
        self.reasoning = reasoning_item("", "in_progress")
        self.output.append(self.reasoning)
        return [self.emit("response.output_item.added", output_index=len(self.output) - 1, item=self.reasoning)]

    def add_reasoning(self, text: str) -> list[str]:
        lines = self.open_reasoning() if self.reasoning is None else []
        self.thought.append(text)
        index = self.output.index(self.reasoning)
        delta = self.emit(
            "response.reasoning_text.delta",
            item_id=self.reasoning["id"],
            output_index=index,
            content_index=0,
            delta=text,
        )
        return [*lines, delta]

    def open_message(self) -> list[str]:
        self.message = message_item([], "in_progress")
        self.output.append(self.message)
        index = len(self.output) - 1
        return [
            self.emit("response.output_item.added", output_index=index, item=self.message),
            self.emit(
                "response.content_part.added",
                item_id=self.message["id"],
                output_index=index,
                content_index=0,
                part=text_part(""),
            ),
        ]

    def add_text(self, text: str, logprobs: list) -> list[str]:
        lines = self.close_open() + self.open_message() if self.message is None else []
        self.text.append(text)
        self.logprobs.extend(logprobs)
        delta = self.emit(
            "response.output_text.delta",
            item_id=self.message["id"],
            output_index=self.output.index(self.message),
            content_index=0,
            delta=text,
            logprobs=logprobs,
        )
        return [*lines, delta]

    def close_open(self, status: str = "completed") -> list[str]:
        """Finish the reasoning item and the message still open (`incomplete`: the token limit cut them off; a
        reasoning item followed by a message was done before it)."""
        reasoning = "completed" if self.message is not None else status
        return self._close_reasoning(reasoning) + self._close_message(status)

    def _close_reasoning(self, status: str = "completed") -> list[str]:
        if self.reasoning is None:
            return []
        item = reasoning_item("".join(self.thought), status, item_id=self.reasoning["id"])
        index = self.output.index(self.reasoning)
        self.output[index], self.reasoning = item, None
        return [
            self.emit(
                "response.reasoning_text.done",
                item_id=item["id"],
                output_index=index,
                content_index=0,
                text=item["content"][0]["text"] if item["content"] else "",
            ),
            self.emit("response.output_item.done", output_index=index, item=item),
        ]

    def _close_message(self, status: str = "completed") -> list[str]:
        if self.message is None:
            return []
        part = text_part("".join(self.text), self.logprobs)
        item = message_item([part], status, item_id=self.message["id"])
        index = self.output.index(self.message)
        self.output[index], self.message = item, None
        return [
            self.emit(
                "response.output_text.done",
                item_id=item["id"],
                output_index=index,
                content_index=0,
                text=part["text"],
                logprobs=part["logprobs"],
            ),
            self.emit("response.content_part.done", item_id=item["id"], output_index=index, content_index=0, part=part),
            self.emit("response.output_item.done", output_index=index, item=item),
        ]

    def add_calls(self, calls: list[dict]) -> list[str]:
        """Each call added whole; a last one the token limit cut off is done as `incomplete`."""
        lines = []
        for n, c in enumerate(calls):
            added = call_item(c, "in_progress", arguments="")
            self.output.append(added)
            index = len(self.output) - 1
            args = c["function"]["arguments"]
            lines += [
                self.emit("response.output_item.added", output_index=index, item=added),
                self.emit(
                    "response.function_call_arguments.delta", item_id=added["id"], output_index=index, delta=args
                ),
                self.emit(
                    "response.function_call_arguments.done",
                    item_id=added["id"],
                    output_index=index,
                    name=added["name"],
                    arguments=args,
                ),
            ]
            cut = self.truncated and n == len(calls) - 1
            self.output[index] = {**added, "arguments": args, "status": "incomplete" if cut else "completed"}
            lines.append(self.emit("response.output_item.done", output_index=index, item=self.output[index]))
        return lines

    def finish(self, end: ChatEnd) -> list[str]:
        """The last items closed (an empty answer is still a message), then `response.completed` (or
        `response.incomplete` when the output budget ran out before any call)."""
        calls = any(item["type"] == "function_call" for item in self.output)
        status = status_of(end, calls, self.truncated)
        lines = []
        if not calls and not any(item["type"] == "message" for item in self.output):
            lines += self.close_open() + self.open_message()
        lines += self.close_open("incomplete" if status == "incomplete" and not calls else "completed")
        tokens = reasoning_tokens(self.shape.count, "".join(self.thought))
        kind = "response.incomplete" if status == "incomplete" else "response.completed"
        return [*lines, self.emit(kind, response=self.shape.body(status, self.output, end, tokens))]

    def fail(self, exc: BaseException) -> list[str]:
        """After the headers, a failure is an `error` event, then `response.failed`."""
        error = as_blink_error(exc)
        if isinstance(error, EngineFailure):
            log.error("response %s failed: %s", self.shape.id, error.message)
        body = render(error)[1]["error"]
        return [
            self.emit("error", code=body["code"], message=body["message"], param=body["param"]),
            self.emit(
                "response.failed",
                response=self.shape.body(
                    "failed", self.output, error={"code": body["code"], "message": body["message"]}
                ),
            ),
        ]


async def events(shape: Shape, reply: Reply) -> AsyncIterator[str]:
    stream = ResponseStream(shape)
    for line in stream.start():
        yield line
    try:
        async for piece in reply:
            for line in stream.on(piece):
                yield line
    except Exception as exc:  # noqa: BLE001 - headers are sent: report in the stream, then end it cleanly
        for line in stream.fail(exc):
            yield line
