"""`tokenizer.encode` that tokenizes a shared prefix once: the state, which every question's prompt repeats.

The prompt builder's tokenizer encodes with it (see `prompts.decision_tokenizer`); the library's rendering and
rendering once both go through it.
"""

from __future__ import annotations

import bisect
import threading

import orjson

from blink.decide.fast_bpe import FastBPE
from blink.plan import common_prefix_length


class PrefixReusingEncoder:
    """`tokenizer.encode` that tokenizes a shared prefix once: the state, which every question's prompt repeats.

    `transformers.decision.prepare_inputs` renders and encodes one full prompt per question, so a request with
    Q questions tokenizes its state Q times (with a 2,200-token state and 16 questions, most of the time the
    request spends outside the model). Here each encode remembers its text, ids and token end offsets (per
    thread: requests are prepared in parallel), and the next text that starts the same way reuses the ids of
    the common part up to a *safe cut* and encodes only the rest.

    A safe cut is the end of a run of newlines followed by a non-space character: Qwen's pre-tokenizer always
    splits there (a newline run is its own pre-token, or ends a punctuation pre-token), and byte-level BPE
    never merges across pre-tokens, so encode(a + b) == encode(a) + encode(b). The template puts "\\n\\n"
    between the state and each question, so the cut falls right after the state. Only tokenizers with that
    pre-tokenizer get the shortcut (checked at start-up, with a self-test); others encode in full.
    """

    MAX_SCAN = 4096  # characters searched backwards from the divergence for a safe cut
    MIN_CHARS = 64  # texts shorter than this are encoded in full and not remembered

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.full = tokenizer.encode
        backend = getattr(tokenizer, "_tokenizer", None)
        # parsed once, with orjson (the stdlib's json takes ~1 s more each way on Qwen's 11 MB at every start)
        spec = orjson.loads(backend.to_str()) if backend is not None else None
        self.backend = self._untrimmed(spec)
        self.local = threading.local()
        cuts_safely = self.backend is not None and self._qwen_pretokenizer(spec)
        self.fast = FastBPE.for_tokenizer(self.backend, spec) if cuts_safely else None
        self.enabled = cuts_safely and self._self_test()  # the self-test runs the fast path too

    @staticmethod
    def _untrimmed(spec: dict | None):
        """A copy of the backend whose offsets aren't trimmed of whitespace (the same ids), so a token's end
        offset is where its text really ends, newlines included."""
        if spec is None:
            return None
        from tokenizers import Tokenizer

        def untrim(node):
            if isinstance(node, dict):
                if node.get("type") == "ByteLevel" and "trim_offsets" in node:
                    node["trim_offsets"] = False
                for value in node.values():
                    untrim(value)
            elif isinstance(node, list):
                for value in node:
                    untrim(value)

        # every section but the model (its 248k-entry vocabulary and merges hold no ByteLevel component)
        untrim({key: value for key, value in spec.items() if key != "model"})
        return Tokenizer.from_str(orjson.dumps(spec).decode())

    @staticmethod
    def _qwen_pretokenizer(spec: dict) -> bool:
        pre = spec.get("pre_tokenizer") or {}
        parts = pre.get("pretokenizers", [pre])
        split = [p for p in parts if p.get("type") == "Split"]
        regex = (split[0].get("pattern") or {}).get("Regex", "") if len(split) == 1 else ""
        return r"\s*[\r\n]+" in regex and any(p.get("type") == "ByteLevel" for p in parts)

    def _self_test(self) -> bool:
        texts = [
            "<|im_start|>user\nA state. It ends here\n\nWhich team?\nA. x<|im_end|>\n",
            "<|im_start|>user\nA state. It ends here\n\nWhat tone?\nA. calm<|im_end|>\n",
            '<|im_start|>user\n{"a": "b\\n"}\n\n\u0301accent, 12 34\n\nB. 5<|im_end|>',
            "A state, all ASCII:  it's 12.5% off\t(see #4471)\n\nWhich team?\nA. x\nB. y\n\n",
            ' "Kaffee" and Kaffee,\r\n  Negeri\n\n',
        ]
        self.local.last = None
        try:
            return all(self._encode(t) == self.full(t, add_special_tokens=False) for t in texts + texts[::-1])
        finally:
            self.local.last = None

    def __call__(self, text, *args, **kwargs):
        if self.enabled and isinstance(text, str) and not args and kwargs == {"add_special_tokens": False}:
            return self._encode(text)
        return self.full(text, *args, **kwargs)

    def _encode(self, text: str) -> list[int]:
        if len(text) < self.MIN_CHARS:  # short texts (e.g. the "\n" probes between pieces) don't displace the cache
            return self._backend_encode(text)[0]
        last = getattr(self.local, "last", None)
        cut = self._safe_cut(last[0], text) if last else 0
        if cut:
            _, ids, ends = last
            k = bisect.bisect_right(ends, cut)
            if k and ends[k - 1] == cut:
                tail_ids, tail_ends = self._backend_encode(text[cut:])
                ids = ids[:k] + tail_ids
                ends = ends[:k] + [cut + end for end in tail_ends]
                self.local.last = (text, ids, ends)
                return list(ids)
        ids, ends = self._backend_encode(text)
        self.local.last = (text, ids, ends)
        return list(ids)

    def _backend_encode(self, text: str) -> tuple[list[int], list[int]]:
        """`text`'s ids and the end offset of each: by tiktoken where it gives `tokenizers`' own ids (plain ASCII
        text, see `fast_bpe`: 3-9x faster), else by `tokenizers`."""
        fast = self.fast.encode(text) if self.fast is not None else None
        return fast if fast is not None else self.library_encode(text)

    def library_encode(self, text: str) -> tuple[list[int], list[int]]:
        """`text`'s ids and the end offset of each, by `tokenizers` (what the fast path must reproduce)."""
        # `encode_batch` releases the GIL while it works and `encode` does not: a 250k-character state encoded in
        # a worker thread would otherwise stall the event loop (and /healthz) for the whole encode
        encoding = self.backend.encode_batch([text], add_special_tokens=False)[0]
        return encoding.ids, [end for _, end in encoding.offsets]

    def _safe_cut(self, previous: str, text: str) -> int:
        """The last safe cut in `text` at or before where it stops matching `previous` (0: none). String
        search and comparison run in C: a character loop over a 10,000-character state costs ~0.4 ms per prompt."""
        same = common_prefix_length([previous, text])
        floor, hi = max(0, same - self.MAX_SCAN), min(same, len(text) - 1)
        # a cut p needs text[p - 1] == "\n" and a non-space text[p] (the tail then starts a new pre-token)
        while (newline := text.rfind("\n", floor, hi)) >= 0:
            if not text[newline + 1].isspace():
                return newline + 1
            hi = newline
        return 0
