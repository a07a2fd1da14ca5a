"""Reasoning text split from the answer: with thinking on, a model writes `<think>…</think>` before it answers;
the wire sends what is inside as reasoning (`reasoning_content`, a Responses `reasoning` item) and the rest
as content, with the tags in neither.

Some chat templates open the block in the prompt (the model's text then starts inside it, and only `</think>`
appears): `opens_thinking(prompt)` says so, and the splitter starts inside. Streaming, text that could still
become a tag is held back until the next piece says whether it is one.
"""

from __future__ import annotations

from blink.generate.text import partial_marker_length

OPEN, CLOSE = "<think>", "</think>"


def opens_thinking(prompt: str) -> bool:
    """Whether the rendered prompt leaves a `<think>` block open for the model to continue."""
    return prompt.rfind(OPEN) > prompt.rfind(CLOSE)


class ReasoningSplit:
    """Feed text deltas; get `(reasoning, content)` pieces back. Only a block at the start of the reply counts:
    `<think>` later in an answer is the answer's own text."""

    def __init__(self, inside: bool = False):
        self.state = "inside" if inside else "start"  # start -> inside -> after -> content
        self.pending = ""
        self.sent = False  # reasoning text sent yet (leading newlines are dropped until some is)

    def feed(self, text: str, final: bool = False) -> tuple[str, str]:
        self.pending += text
        reasoning = ""
        if self.state == "start":
            stripped = self.pending.lstrip()
            if stripped.startswith(OPEN):
                self.state, self.pending = "inside", stripped[len(OPEN) :]
            elif OPEN.startswith(stripped) and not final:
                return "", ""  # maybe the tag, still arriving
            else:
                self.state = "content"
        if self.state == "inside":
            if not self.sent:
                self.pending = self.pending.lstrip("\n")
            end = self.pending.find(CLOSE)
            if end >= 0:
                reasoning, self.pending = self.pending[:end].rstrip("\n"), self.pending[end + len(CLOSE) :]
                self.state = "after"
            else:
                # held back: a tag still arriving, and newlines that may turn out to end the block
                cut = len(self.pending)
                if not final:
                    cut -= partial_marker_length(self.pending, (CLOSE,))
                    cut = len(self.pending[:cut].rstrip("\n"))
                reasoning, self.pending = self.pending[:cut], self.pending[cut:]
                if final:
                    reasoning = reasoning.rstrip("\n")
                self.sent = self.sent or bool(reasoning)
                return reasoning, ""
        if self.state == "after":  # the newlines between the block and the answer belong to neither
            self.pending = self.pending.lstrip("\n")
            if not self.pending:
                return reasoning, ""
            self.state = "content"
        content, self.pending = self.pending, ""
        return reasoning, content

    def finish(self) -> tuple[str, str]:
        return self.feed("", final=True)


def split(text: str, inside: bool = False) -> tuple[str, str]:
    """A whole reply as (reasoning, content)."""
    splitter = ReasoningSplit(inside)
    r1, c1 = splitter.feed(text)
    r2, c2 = splitter.finish()
    return r1 + r2, c1 + c2
