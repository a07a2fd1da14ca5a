"""Prompt rendering and readout labels: a validated decision becomes token ids and read positions.

Rendering is `transformers.decision.prepare_inputs`: the model's own `decision_template.jinja` when it ships
one, else the generic label prompt inside the model's chat template with thinking off. What this module adds:

- labels past 26 options. The generic prompt labels options `A`..`Z`; a choice may have up to 255. After
  `Z` come the two-letter labels `AA`, `AB`, ... that the tokenizer encodes as ONE token (562 of 676 for
  Qwen3.5), so every option is still read from one position with one logit. The cost of a wide choice is
  only its longer prompt (about 4 tokens per option) and 255 rows of the LM head instead of 26.
- the read plan: per prompt its token ids and, per question, the position whose next-token logits are read,
  the label token ids, and the question type's temperature.
"""

from __future__ import annotations

import bisect
import copy
import hashlib
import json
import string
import threading
from itertools import product

from transformers import AddedToken
from transformers.decision import DecisionConfig, label_token_ids, prepare_inputs
from transformers.decision.template_utils import MARK, SPLIT

from .errors import InvalidRequest
from .limits import Limits
from .plan import Image, Prompt, Read, common_prefix_length, processed_tokens
from .questions import Decision

MAX_LABELS = 255


def wide_labels(tokenizer, count: int = MAX_LABELS) -> list[str]:
    """`A`..`Z`, then the two-letter uppercase labels that are single tokens, up to `count`."""
    labels = list(string.ascii_uppercase)
    for a, b in product(string.ascii_uppercase, repeat=2):
        if len(labels) >= count:
            break
        ids = tokenizer(a + b, add_special_tokens=False)["input_ids"]
        if len(ids) == 1:
            labels.append(a + b)
    return labels[:count]


def decision_config_for(model_dir: str, tokenizer) -> DecisionConfig:
    """The model's own decision config when it ships one, with wide labels filled in where it sets none."""
    config = DecisionConfig.from_pretrained(model_dir)
    wide = wide_labels(tokenizer)
    for kind in ("choice", "score"):
        config.labels.setdefault(kind, wide)
    for kind, labels in config.labels.items():
        label_token_ids(tokenizer, tuple(labels))  # raises at load if a label isn't a single token
    return config


def decision_tokenizer(tokenizer):
    """The tokenizer prompts are rendered with: a shallow copy of the loaded one (the same vocabulary and
    backend) with two methods of its own, so the tokenizer chat shares stays as loaded.

    `get_vocab`: `prepare_inputs` checks `MARK in tokenizer.get_vocab()` on every request, which rebuilds a
    248k-entry dict (~0.2 s); this copy answers from the vocabulary frozen once (nothing adds tokens after
    start-up). `encode`: the prefix-reusing encoder. The sentinel tokens themselves go into the shared
    vocabulary, as `prepare_inputs` would add them."""
    if MARK not in tokenizer.get_vocab():
        tokenizer.add_tokens([AddedToken(token, special=True, normalized=False) for token in (MARK, SPLIT)])
    own = copy.copy(tokenizer)
    vocab = tokenizer.get_vocab()
    own.get_vocab = lambda: vocab
    own.encode = PrefixReusingEncoder(tokenizer)
    return own


def with_tokenizer(processor, tokenizer):
    """A shallow copy of `processor` that renders with `tokenizer` (its image processor stays shared)."""
    own = copy.copy(processor)
    own.tokenizer = tokenizer
    return own


class PromptBuilder:
    def __init__(self, tokenizer, config: DecisionConfig, limits: Limits, processor=None):
        self.tokenizer = decision_tokenizer(tokenizer)
        self.processor = None if processor is None else with_tokenizer(processor, self.tokenizer)
        self.config = config
        self.limits = limits
        self._label_ids: dict[tuple, list[int]] = {}

    def label_ids(self, labels: list[str]) -> list[int]:
        key = tuple(labels)
        if key not in self._label_ids:
            self._label_ids[key] = label_token_ids(self.tokenizer, key)
        return self._label_ids[key]

    def build(self, decision: Decision, images: dict | None = None) -> list[Prompt]:
        """Tokenized prompts for a decision, checked against the context limits (422, nothing truncated).
        `images` maps placeholders to decoded images (vision models only)."""
        request = {"state": decision.state, "questions": decision.raw_questions}
        if images:
            request["assets"] = images
        prompts, shared = [], {}
        for inputs, questions in prepare_inputs(self.config, request, self.processor or self.tokenizer):
            ids = inputs["input_ids"][0].tolist()
            marks = inputs["marks"].tolist()
            if len(ids) > self.limits.max_context_tokens:
                loc = ["body", "questions", questions[0].name] if len(questions) == 1 else ["body", "questions"]
                who = f"question {questions[0].name!r}" if len(questions) == 1 else "the questions"
                raise InvalidRequest(
                    f"{who} with the state makes a prompt of {len(ids)} tokens; this server's context limit is "
                    f"{self.limits.max_context_tokens} tokens per prompt (state + question). Nothing was truncated: "
                    "shorten the state.", loc=loc, kind="context_length_exceeded")
            reads = [Read(int(mark) - 1, self.label_ids(q.labels), float(self.config.temperature.get(q.type, 1.0)))
                     for q, mark in zip(questions, marks)]
            prompts.append(Prompt(ids, reads, split_images(inputs, shared)))
        total = processed_tokens(prompts)
        if total > self.limits.max_request_tokens:
            raise InvalidRequest(
                f"the request needs {total} tokens (shared state counted once); this server's limit is "
                f"{self.limits.max_request_tokens} per request. Split the questions over several requests.",
                loc=["body", "questions"], kind="context_length_exceeded")
        return prompts


def split_images(inputs: dict, shared: dict) -> list[Image]:
    """The prompt's images, one `Image` per occurrence, the same object for the same pixels across prompts."""
    if "pixel_values" not in inputs:
        return []
    out, start = [], 0
    for grid in inputs["image_grid_thw"].tolist():
        patches = grid[0] * grid[1] * grid[2]
        pixels = inputs["pixel_values"][start:start + patches].contiguous()
        start += patches
        key = hashlib.sha256(pixels.numpy().tobytes()).hexdigest()[:32] + "-" + "x".join(map(str, grid))
        out.append(shared.setdefault(key, Image(key, pixels, grid)))
    return out


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
    MIN_CHARS = 64   # texts shorter than this are encoded in full and not remembered

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.full = tokenizer.encode
        backend = getattr(tokenizer, "_tokenizer", None)
        spec = json.loads(backend.to_str()) if backend is not None else None  # parsed once: ~1 s for Qwen's
        self.backend = self._untrimmed(spec)
        self.local = threading.local()
        self.enabled = self.backend is not None and self._qwen_pretokenizer(spec) and self._self_test()

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
        return Tokenizer.from_str(json.dumps(spec))

    @staticmethod
    def _qwen_pretokenizer(spec: dict) -> bool:
        pre = spec.get("pre_tokenizer") or {}
        parts = pre.get("pretokenizers", [pre])
        split = [p for p in parts if p.get("type") == "Split"]
        regex = (split[0].get("pattern") or {}).get("Regex", "") if len(split) == 1 else ""
        return r"\s*[\r\n]+" in regex and any(p.get("type") == "ByteLevel" for p in parts)

    def _self_test(self) -> bool:
        texts = ["<|im_start|>user\nA state. It ends here\n\nWhich team?\nA. x<|im_end|>\n",
                 "<|im_start|>user\nA state. It ends here\n\nWhat tone?\nA. calm<|im_end|>\n",
                 "<|im_start|>user\n{\"a\": \"b\\n\"}\n\n\u0301accent, 12 34\n\nB. 5<|im_end|>"]
        self.local.last = None
        try:
            return all(self._encode(t) == self.full(t, add_special_tokens=False) for t in texts + texts[::-1])
        finally:
            self.local.last = None

    def __call__(self, text, *args, **kwargs):
        if (self.enabled and isinstance(text, str) and not args and kwargs == {"add_special_tokens": False}):
            return self._encode(text)
        return self.full(text, *args, **kwargs)

    def _encode(self, text: str) -> list[int]:
        if len(text) < self.MIN_CHARS:  # short texts (e.g. the "\n" probes between pieces) don't displace the cache
            return self.backend.encode(text, add_special_tokens=False).ids
        last = getattr(self.local, "last", None)
        cut = self._safe_cut(last[0], text) if last else 0
        if cut:
            _, ids, ends = last
            k = bisect.bisect_right(ends, cut)
            if k and ends[k - 1] == cut:
                tail = self.backend.encode(text[cut:], add_special_tokens=False)
                ids = ids[:k] + tail.ids
                ends = ends[:k] + [cut + end for _, end in tail.offsets]
                self.local.last = (text, ids, ends)
                return list(ids)
        encoding = self.backend.encode(text, add_special_tokens=False)
        self.local.last = (text, encoding.ids, [end for _, end in encoding.offsets])
        return list(encoding.ids)

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
