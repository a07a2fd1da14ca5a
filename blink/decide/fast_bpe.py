"""The model's byte-level BPE run by tiktoken, on the texts where it gives the tokenizer's own ids.

Why: `tokenizers` splits pre-tokens with Oniguruma, about 0.2 µs a character. A 64-token state costs ~110 µs to
encode back to back and ~260 µs after the thread did other work; tiktoken runs the same pattern over the same ranks
in ~13 / ~84 µs, and a 1,000-token state in a fraction of a millisecond where `tokenizers` takes ~3 ms
(`bench/latency/state_encode.py`). A new state is tokenized on every request that brings it, so this is most of what a
new state costs outside the model.

When the two agree, and why this checks each condition instead of assuming it:
- The vocabulary is byte-level BPE whose merges are *every* split of every token into two tokens, listed in the
  order of the merged token's rank: what a tiktoken vocabulary becomes when converted for `tokenizers`
  (transformers' `TikTokenConverter`). Merging the adjacent pair whose merge comes first (`tokenizers`) is then
  merging the pair whose merged token ranks lowest (tiktoken). A vocabulary trained as merges is not of this kind
  and never takes this path.
- tiktoken takes a pre-token that is itself a token as that token, where `tokenizers` (`ignore_merges: false`)
  still merges its bytes, and a few tokens are never reached by merging (Qwen's vocabulary has 234, 58 of them
  ASCII, e.g. " Kaffee"). An answer holding one of those goes to `tokenizers` instead.
- The text is ASCII: NFC changes nothing, and the pattern's Unicode classes (Oniguruma's tables in `tokenizers`,
  the regex crate's in tiktoken) agree on it.
- The text holds no added token: `tokenizers` splits those out before anything else.
Everything else returns None, and the caller encodes with `tokenizers`. `ci/tests/test_fast_bpe.py` compares the
two by property, on the repository's own files and on every ASCII token of the vocabulary.
"""

from __future__ import annotations

import re
from itertools import accumulate

import tiktoken
from transformers.convert_slow_tokenizer import bytes_to_unicode

from blink.tokens import any_of


class FastBPE:
    """`encode(text)`: the ids and end offsets `tokenizers` would give `text`, or None where it might not."""

    def __init__(self, encoding: tiktoken.Encoding, lengths: list, unreached: frozenset, added: re.Pattern | None):
        self.encoding = encoding
        # by id: an ASCII token's bytes (an ASCII text's tokens: its characters), 0 for the others. A list, not a
        # dict: the lookups of a new state's tokens run with the caches cold after a pass, and indexing a list
        # touches one slot where a dict probe touches three (~30 µs less for a 64-token state, bench/RESULTS.md)
        self.lengths = lengths
        self.unreached = unreached  # ids `tokenizers` never merges a token's own bytes into
        self.added = added  # finds any added token's text (blink.tokens.any_of)

    @classmethod
    def for_tokenizer(cls, backend, spec: dict) -> FastBPE | None:
        """The fast path for a `tokenizers.Tokenizer` (`spec`: its parsed JSON), or None where its vocabulary or
        pipeline isn't one tiktoken reproduces. Only the ASCII tokens matter (an ASCII text's bytes merge into
        nothing else), so only they are checked and handed to tiktoken: ~1.4 s at start-up for Qwen's 248k on
        a 2-core CPU (the merge-order check ~1.1 s of it)."""
        pattern, model = _split_pattern(spec), _plain_bpe(spec)
        if pattern is None or model is None:
            return None
        vocab = _ascii_vocab(model)
        if not vocab or not _every_split_in_rank_order(vocab, model.get("merges") or []):
            return None
        texts = _texts(vocab)
        encoding = _encoding(pattern, texts)
        if encoding is None:
            return None
        added = any_of(token.content for token in backend.get_added_tokens_decoder().values())
        lengths = [0] * (max(texts) + 1)
        for rank, text in texts.items():
            lengths[rank] = len(text)
        return cls(encoding, lengths, _unreached(backend, model, vocab), added)

    def encode(self, text: str) -> tuple[list[int], list[int]] | None:
        if not text.isascii() or (self.added is not None and self.added.search(text)):
            return None
        ids = self.encoding.encode_ordinary(text)
        if self.unreached and not self.unreached.isdisjoint(ids):
            return None
        return ids, list(accumulate(map(self.lengths.__getitem__, ids)))


def _plain_bpe(spec: dict) -> dict | None:
    """The tokenizer's model when it is plain BPE (no dropout, byte fallback or subword affixes) behind no
    normalizer but NFC, else None."""
    model = spec.get("model") or {}
    affixes = ("dropout", "byte_fallback", "continuing_subword_prefix", "end_of_word_suffix")
    if model.get("type") != "BPE" or any(model.get(key) for key in affixes):
        return None
    return model if (spec.get("normalizer") or {}).get("type") in (None, "NFC") else None


def _ascii_vocab(model: dict) -> dict:
    """The vocabulary's ASCII tokens: token (in byte-level's characters) -> rank."""
    ascii_chars = {char for byte, char in bytes_to_unicode().items() if byte < 128}
    return {token: rank for token, rank in (model.get("vocab") or {}).items() if ascii_chars.issuperset(token)}


def _texts(vocab: dict) -> dict:
    """Rank -> the text of an ASCII token (byte-level's characters mapped back to their bytes)."""
    as_text = str.maketrans({char: chr(byte) for byte, char in bytes_to_unicode().items() if byte < 128})
    return {rank: token.translate(as_text) for token, rank in vocab.items()}


def _encoding(pattern: str, texts: dict) -> tiktoken.Encoding | None:
    """tiktoken over the ASCII tokens' ranks (`texts`: rank -> its text), or None where tiktoken's regex engine
    doesn't parse the pattern (the library then encodes everything)."""
    ranks = {text.encode(): rank for rank, text in texts.items()}
    try:
        return tiktoken.Encoding("blink-bpe", pat_str=pattern, mergeable_ranks=ranks, special_tokens={})
    except ValueError:
        return None


def _unreached(backend, model: dict, vocab: dict) -> frozenset:
    """The ids `tokenizers` never merges a token's own bytes into (none with `ignore_merges`: `tokenizers` then
    looks a whole pre-token up first too, as tiktoken does)."""
    if model.get("ignore_merges"):
        return frozenset()
    return frozenset(rank for token, rank in vocab.items() if [t.id for t in backend.model.tokenize(token)] != [rank])


def _split_pattern(spec: dict) -> str | None:
    """The pre-tokenizer's one regex when it is `Split(regex, isolated)` then byte-level without its own regex or
    prefix space: the pipeline tiktoken runs."""
    pre = spec.get("pre_tokenizer") or {}
    parts = pre.get("pretokenizers", [pre]) if pre.get("type") == "Sequence" else [pre]
    if len(parts) != 2 or parts[0].get("type") != "Split" or parts[1].get("type") != "ByteLevel":
        return None
    split, byte_level = parts
    if split.get("behavior") != "Isolated" or split.get("invert") or byte_level.get("add_prefix_space"):
        return None
    if byte_level.get("use_regex", True):
        return None
    return (split.get("pattern") or {}).get("Regex")


def _every_split_in_rank_order(vocab: dict, merges: list) -> bool:
    """Among `vocab`'s tokens, the merges are exactly every split of a token into two tokens, and a merge never
    comes after one whose result ranks higher."""
    last, listed = -1, 0
    for merge in merges:
        left, right = merge if isinstance(merge, list) else merge.split(" ", 1)
        rank = vocab.get(left + right)
        if rank is None:
            continue
        if rank < last or left not in vocab or right not in vocab:
            return False
        last, listed = rank, listed + 1
    splits = sum(1 for token in vocab for cut in range(1, len(token)) if token[:cut] in vocab and token[cut:] in vocab)
    return splits == listed
