"""Token logprobs for chat generation, in OpenAI's shape, lined up with the text a generator sends.

An entry per generated token: `{"token": str, "logprob": float, "bytes": [int], "top_logprobs": [{"token",
"logprob", "bytes"}]}`. `logprob` is read from the distribution the sampler drew the token from (see
`blink.generate.chat_engine._sample`); `top_logprobs` lists the k most likely tokens of that distribution, most
likely first, leaving out those it gave no chance (-inf: filtered by top-k / top-p or forbidden by a grammar).
`bytes` are the bytes the token adds to the text (none for a hidden control token), so the entries' bytes put
together are exactly the bytes of the text sent with them.
"""

from __future__ import annotations


class TokenLogprobs:
    """Logprob entries per generated token, handed out with the text that carries them: a token's entry goes
    with the delta that completes its bytes (the detokenizer and the stop-string hold-back delay text, never
    reorder it), so the entries of all deltas together line up with the text sent."""

    def __init__(self, tokenizer, hidden: frozenset[int], top: int):
        self.tokenizer = tokenizer
        self.hidden = hidden
        self.top = max(0, min(int(top), 20))
        self.pending: list[tuple[int, int, dict]] = []  # (first byte, end byte, entry) in generation order
        self.generated = 0  # bytes of text generated
        self.sent = 0  # bytes of text handed out

    def _entry(self, token: int, logprob: float) -> dict:
        return token_entry(self.tokenizer, self.hidden, token, logprob)

    def push(self, token: int, distribution, shown: bool = True) -> None:
        """A drawn token's entry; `shown` False: it adds no text (an end-of-sequence token), so no bytes either."""
        import torch

        entry = self._entry(token, float(distribution[token]))
        if not shown:
            entry["bytes"] = []
        top = []
        if self.top:
            values, indices = torch.topk(distribution, self.top)
            top = [
                self._entry(int(i), float(v)) for v, i in zip(values.tolist(), indices.tolist()) if v != float("-inf")
            ]  # tokens the sampler could not draw are not listed
        entry["top_logprobs"] = top
        start = self.generated
        self.generated += len(entry["bytes"])
        self.pending.append((start, self.generated, entry))

    def sent_text(self, text: str) -> list[dict]:
        """`text` goes out now: the entries of the tokens it completes."""
        self.sent += len(text.encode("utf-8"))
        done = [e for e in self.pending if e[1] <= self.sent]
        self.pending = self.pending[len(done) :]
        return [entry for _, _, entry in done]

    def partly_sent(self) -> list[dict]:
        """At the end: the entries of tokens whose text was cut by a stop string after its first byte."""
        out = [entry for start, _, entry in self.pending if start < self.sent]
        self.pending = []
        return out


def token_entry(tokenizer, hidden: frozenset[int], token: int, logprob: float | None) -> dict:
    """One token's `{token, logprob, bytes}`: a hidden control token adds no bytes and shows its name."""
    raw = b"" if token in hidden else token_bytes(tokenizer, token)
    text = raw.decode("utf-8", errors="replace") if raw else tokenizer.convert_ids_to_tokens(token)
    return {"token": text, "logprob": logprob, "bytes": list(raw)}


_BYTE_OF_CHAR: dict[str, int] = {}


def token_bytes(tokenizer, token: int) -> bytes:
    """The bytes a token adds to the text: byte-level BPE spells them with printable stand-ins (GPT-2's table);
    other tokenizers decode the token alone."""
    if not _BYTE_OF_CHAR:
        from transformers.convert_slow_tokenizer import bytes_to_unicode

        _BYTE_OF_CHAR.update({c: b for b, c in bytes_to_unicode().items()})
    decoder = getattr(getattr(tokenizer, "backend_tokenizer", None), "decoder", None)
    piece = tokenizer.convert_ids_to_tokens(token)
    if type(decoder).__name__ == "ByteLevel" and isinstance(piece, str) and all(c in _BYTE_OF_CHAR for c in piece):
        return bytes(_BYTE_OF_CHAR[c] for c in piece)
    return tokenizer.decode([token], skip_special_tokens=False).encode("utf-8")
