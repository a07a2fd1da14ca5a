"""Counting tokens in time bounded by the limit, not by the text: a state or message past the context window is
refused after tokenizing about the window's worth of it, never the whole of a 64 MB body."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable

_LONGEST: dict[int, tuple[object, int]] = {}  # id(tokenizer) -> (the tokenizer, kept so its id is not reused; value)
_LONGEST_LOCK = threading.Lock()


def any_of(texts: Iterable[str]) -> re.Pattern | None:
    """One compiled search finding any of `texts` (None when there are none): a text holding an added or control
    token is found in one pass (~0.4 µs on a 64-token state), where a substring test per token costs ~7 µs."""
    escaped = [re.escape(text) for text in texts if text]
    return re.compile("|".join(escaped)) if escaped else None


def longest_token_chars(tokenizer) -> int:
    """The most characters one token of this vocabulary stands for (byte-level BPE: bytes, a bound on chars).
    Computed once per tokenizer: `get_vocab()` is one call of about a second that holds the GIL (every other
    thread, the event loop's included, waits it out), so it is paid at startup, by whoever asks first, never again
    on a request."""
    with _LONGEST_LOCK:
        known = _LONGEST.get(id(tokenizer))
        if known is not None and known[0] is tokenizer:
            return known[1]
        vocab = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
        longest = 1
        for piece in vocab:
            longest = max(longest, len(piece))
        _LONGEST[id(tokenizer)] = (tokenizer, longest)
        return longest


def capped_tokens(
    encode: Callable[[str], list], text: str, max_tokens: int, longest_token: int, first_chars: int | None = None
) -> int | None:
    """The number of tokens in `text`, or None when it has more than `max_tokens`, found in time proportional to
    the limit: past `max_tokens * longest_token` characters the text cannot fit (refused untokenized); below it
    a prefix is tokenized, doubling from `first_chars` (default: 4 characters a token) until either its tokens
    pass the limit or the prefix is the whole text. A cut can split one word into more tokens than it has
    whole, so a prefix counts as over only past `max_tokens + 1`."""
    if len(text) > max_tokens * longest_token:
        return None
    if len(text) <= max_tokens:  # byte-level BPE never has more tokens than characters... of one byte each
        if len(text.encode("utf-8")) <= max_tokens:
            return len(encode(text))
    cut = min(len(text), first_chars or max_tokens * 4)
    while True:
        n = len(encode(text[:cut]))
        if cut >= len(text):
            return n if n <= max_tokens else None
        if n > max_tokens + 1:
            return None
        cut = min(len(text), cut * 2)


class TokenCap:
    """`capped_tokens` bound to one tokenizer: `fits(text, max_tokens)` in time proportional to the limit."""

    def __init__(self, tokenizer):
        self.longest = longest_token_chars(tokenizer)
        self.tokenizer = tokenizer

    def encode(self, text: str) -> list:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def fits(self, text: str, max_tokens: int) -> bool:
        # every byte-level BPE token stands for at least one byte: a text of no more bytes than the limit fits
        # untokenized (the common case, so a pre-check before a full render costs no second tokenize)
        if len(text) <= max_tokens and len(text.encode("utf-8")) <= max_tokens:
            return True
        return capped_tokens(self.encode, text, max_tokens, self.longest) is not None
