"""One generation behind an OpenAI route (chat, responses, completions): started the same way, read the same way.

The chat service (blink.generate.service) renders, counts and starts the generation; `Reply` reads its stream as
the wires need it: reasoning (`<think>` text, with thinking on, blink.generate.reasoning), content, tool calls
(blink.generate.toolcalls, parsed from the content only), and the final blink.generate.chat_engine.ChatEnd. `whole`
collects a reply for a non-streamed answer.

The generator yields `str` deltas, or objects with `.text` and `.logprobs` (token logprobs, when asked); a
piece's logprobs go out with the next content sent (text a tool call or a tag holds back keeps them waiting).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from starlette.responses import StreamingResponse

from blink.errors import BlinkError, EngineFailure
from blink.generate.chat_engine import ChatEnd
from blink.generate.reasoning import ReasoningSplit
from blink.generate.service import ChatService
from blink.generate.toolcalls import ToolStream, parse
from blink.web.endpoint import Call
from blink.web.streams import KEEPALIVE, GeneratorStream


def as_blink_error(exc: BaseException) -> BlinkError:
    if isinstance(exc, BlinkError):
        return exc
    return EngineFailure(f"generation failed: {type(exc).__name__}: {exc}", kind="generation_failed")


def sse(obj, event: str | None = None) -> str:
    data = "data: " + json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n\n"
    return f"event: {event}\n{data}" if event else data


def sse_response(call: Call, events: AsyncIterator[str]) -> StreamingResponse:
    call.held.push_async_callback(events.aclose)
    return StreamingResponse(
        events, media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )


@dataclass
class Reasoning:
    text: str


@dataclass
class Content:
    text: str
    logprobs: list | None = None  # OpenAI's token entries, when asked


@dataclass
class Calls:
    calls: list[dict]  # chat's `tool_calls` entries (with `index`)
    truncated: bool = False  # the last one was cut off by the token limit (blink.generate.toolcalls.parse)


class Reply:
    """A generation as the wire sends it: KEEPALIVE, Reasoning, Content and Calls pieces, then the ChatEnd."""

    def __init__(
        self,
        stream: GeneratorStream,
        *,
        tool_names: list[str] | None = None,
        thinking: bool = False,
        inside: bool = False,
        parallel_calls: bool = True,
        max_calls: int | None = None,
    ):
        self.stream = stream
        self.max_calls = max_calls  # Responses' `max_tool_calls`: the calls past it are dropped
        self.tool_names = tool_names
        self.parallel_calls = parallel_calls  # false: only the first call counts (`parallel_tool_calls: false`)
        self.tools = ToolStream(tool_names) if tool_names else None  # `whole` parses the whole text instead
        self.reasoning = ReasoningSplit(inside) if thinking else None
        self.logprobs: list | None = None

    @classmethod
    def of_chat(
        cls,
        chats: ChatService,
        stream: GeneratorStream,
        ids: list[int],
        tool_names: list[str] | None,
        parallel_calls: bool = True,
        max_calls: int | None = None,
    ) -> Reply:
        """A chat turn's reply: reasoning split when the server thinks (the prompt may have opened the block)."""
        thinking, inside = chats.thinking(ids)
        return cls(
            stream,
            tool_names=tool_names,
            thinking=thinking,
            inside=inside,
            parallel_calls=parallel_calls,
            max_calls=max_calls,
        )

    def _content(self, text: str, logprobs: list | None):
        if logprobs is not None:
            self.logprobs = (self.logprobs or []) + logprobs
        if self.tools:
            text = self.tools.feed(text)
        if text:
            sent, self.logprobs = self.logprobs, None
            return Content(text, sent)
        return None

    def _pieces(self, text: str, logprobs: list | None, final: bool = False):
        if self.reasoning is None:
            content = self._content(text, logprobs)
            return [content] if content else []
        reasoning, answer = self.reasoning.feed(text, final)
        out = [Reasoning(reasoning)] if reasoning else []
        content = self._content(answer, logprobs)
        return out + ([content] if content else [])

    def kept(self, parsed) -> tuple[list[dict], bool]:
        """The calls the reply answers with (only the first with `parallel_tool_calls: false`, at most
        `max_calls`), and whether the last of them was cut off by the token limit."""
        limit = 1 if not self.parallel_calls else self.max_calls
        if limit is None or len(parsed.calls) <= limit:
            return parsed.calls, parsed.truncated
        return parsed.calls[:limit], False

    async def __aiter__(self):
        final = None
        async for item in self.stream:
            if item is KEEPALIVE:
                yield KEEPALIVE
            elif isinstance(item, ChatEnd):
                final = item
            else:
                text, logprobs = (item, None) if isinstance(item, str) else (item.text, item.logprobs)
                for piece in self._pieces(text, logprobs):
                    yield piece
        if final is None:
            raise EngineFailure("generation ended without a result", kind="generation_failed")
        for piece in self._pieces("", None, final=True) if self.reasoning else []:
            yield piece
        if self.tools:
            parsed = self.tools.finish(truncated=final.finish_reason == "length")
            if parsed.content or self.logprobs:
                yield Content(parsed.content or "", self.logprobs)
                self.logprobs = None
            if parsed.calls:
                yield Calls(*self.kept(parsed))
        elif self.logprobs:
            yield Content("", self.logprobs)
            self.logprobs = None
        yield final


@dataclass
class Whole:
    """A reply collected: for the non-streamed answers."""

    final: ChatEnd
    content: str = ""
    reasoning: str = ""
    calls: list[dict] = field(default_factory=list)
    logprobs: list | None = None
    truncated: bool = False  # the last call was cut off by the token limit


async def whole(reply: Reply) -> Whole:
    """The reply's pieces joined; tool calls parsed from the whole content at once (as the stream can't)."""
    content, reasoning, calls, logprobs, final, truncated = [], [], [], None, None, False
    reply.tools = None
    try:
        async for piece in reply:
            if isinstance(piece, ChatEnd):
                final = piece
            elif isinstance(piece, Reasoning):
                reasoning.append(piece.text)
            elif isinstance(piece, Content):
                content.append(piece.text)
                if piece.logprobs is not None:
                    logprobs = (logprobs or []) + piece.logprobs
            elif isinstance(piece, Calls):
                calls.extend(piece.calls)
                truncated = piece.truncated
    except Exception as exc:  # noqa: BLE001 - the generator's failure, in the wire's shape
        raise as_blink_error(exc) from None
    text = "".join(content)
    if reply.tool_names:
        parsed = parse(text, reply.tool_names, truncated=final.finish_reason == "length")
        if parsed.calls:
            text = parsed.content or ""
            calls, truncated = reply.kept(parsed)
    return Whole(final, text, "".join(reasoning), calls, logprobs, truncated)
