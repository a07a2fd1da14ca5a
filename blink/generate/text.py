"""Text helpers shared by the decode loops (blink's own and vLLM's: token ids to text, stop strings) and the
tool-call parser (call markers)."""

from __future__ import annotations


def partial_marker_length(text: str, markers) -> int:
    """How many trailing characters of `text` could be the start of one of `markers`: text a stream must
    hold back until the next piece says whether a marker (a tool-call tag, a stop string) is coming."""
    keep = 0
    for marker in markers:
        for n in range(min(len(marker) - 1, len(text)), keep, -1):
            if text.endswith(marker[:n]):
                keep = n
                break
    return keep


class IncrementalDecoder:
    """Incremental detokenization: text appears once its bytes are complete (no split UTF-8 sequences)."""

    def __init__(self, tokenizer, hidden: frozenset[int] = frozenset()):
        self.tokenizer = tokenizer
        self.hidden = hidden
        self.tokens: list[int] = []
        self.prefix = 0
        self.read = 0

    def _decode(self, tokens: list[int]) -> str:
        return self.tokenizer.decode([t for t in tokens if t not in self.hidden], skip_special_tokens=False)

    def push(self, token: int) -> str:
        self.tokens.append(token)
        before = self._decode(self.tokens[self.prefix : self.read])
        after = self._decode(self.tokens[self.prefix :])
        if len(after) > len(before) and not after.endswith("\ufffd"):
            self.prefix, self.read = self.read, len(self.tokens)
            return after[len(before) :]
        return ""

    def flush(self) -> str:
        before = self._decode(self.tokens[self.prefix : self.read])
        after = self._decode(self.tokens[self.prefix :])
        self.prefix = self.read = len(self.tokens)
        return after[len(before) :] if len(after) > len(before) else ""


class StopStrings:
    """Holds back text that may still become a stop string; reports when one completes (it is not sent)."""

    def __init__(self, stops: list[str]):
        self.stops = stops
        self.pending = ""
        self.hit = False

    def push(self, text: str, final: bool = False) -> tuple[str, bool]:
        if self.hit:
            return "", True
        self.pending += text
        if not self.stops:
            out, self.pending = self.pending, ""
            return out, False
        found = [i for i in (self.pending.find(s) for s in self.stops) if i >= 0]
        if found:
            self.hit = True
            out, self.pending = self.pending[: min(found)], ""
            return out, True
        if final:
            out, self.pending = self.pending, ""
            return out, False
        keep = partial_marker_length(self.pending, self.stops)
        out = self.pending[: len(self.pending) - keep]
        self.pending = self.pending[len(self.pending) - keep :]
        return out, False
