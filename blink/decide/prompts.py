"""Prompt rendering and readout labels: a validated decision becomes token ids and read positions.

Rendering is `transformers.decision.prepare_inputs`: the model's own `decision_template.jinja` when it ships
one, else the generic label prompt inside the model's chat template with thinking off. What this module adds:

- labels past 26 options. The generic prompt labels options `A`..`Z`; a choice may have up to 255. After
  `Z` come the two-letter labels `AA`, `AB`, ... that the tokenizer encodes as ONE token (562 of 676 for
  Qwen3.5), so every option is still read from one position with one logit. The cost of a wide choice is
  only its longer prompt (about 4 tokens per option) and 255 rows of the LM head instead of 26.
- the read plan: per prompt its token ids and, per question, the position whose next-token logits are read,
  the label token ids, and the question type's temperature.
- rendering once (`OnceRenderer`): the generic prompt of a text-only request is the chat head, the state, and
  one question part per question; the state is rendered and tokenized once per request and each question part
  once per distinct question (an LRU), instead of a Jinja render, a chat-template render and a tensor
  conversion per question. It is the library's rendering split where it splits anyway, checked at start-up
  against `prepare_inputs`; anything it cannot prove equal (images, a model's own decision template, control
  tokens in user text) takes `prepare_inputs`. The state is tokenized by `prefix_encoder.PrefixReusingEncoder`.
- save points for the prefix-state cache: `state_end` (the end of the state, also found in the library's prompts
  with images) and `system_end` (the end of a long system message leading a transcript state).
"""

from __future__ import annotations

import copy
import json
import string
import threading
from array import array
from collections import OrderedDict
from itertools import product

from transformers import AddedToken
from transformers.decision import DecisionConfig, label_token_ids, prepare_inputs
from transformers.decision.template_utils import DECISION_PROMPT, MARK, SPLIT
from transformers.utils.chat_template_utils import _CONTROL_TOKEN_END, _CONTROL_TOKEN_START, _compile_jinja_template

from blink.decide.prefix_encoder import PrefixReusingEncoder
from blink.decide.questions import Decision
from blink.errors import InvalidRequest
from blink.images.processed import split_images
from blink.limits import Limits
from blink.plan import Prompt, Read, RenderedPrompt, processed_tokens
from blink.tokens import any_of, capped_tokens, longest_token_chars

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
    for labels in config.labels.values():
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
        self.longest_token = longest_token_chars(self.tokenizer)
        self.once = OnceRenderer(self.tokenizer, config, self.longest_token)
        if self.once.enabled:
            self.once.enabled = self.once.self_test(self._library_prompts)

    def label_ids(self, labels: list[str]) -> list[int]:
        key = tuple(labels)
        if key not in self._label_ids:
            self._label_ids[key] = label_token_ids(self.tokenizer, key)
        return self._label_ids[key]

    def build(self, decision: Decision, images: dict | None = None) -> list[Prompt]:
        """Tokenized prompts for a decision, checked against the context limits (422, nothing truncated).
        `images` maps placeholders to decoded images (vision models only)."""
        return self.counted(decision, images)[0]

    def counted(self, decision: Decision, images: dict | None = None) -> tuple[list[Prompt], int]:
        """`build`'s prompts and the tokens the executor runs for them (`processed_tokens`, found once: finding the
        shared prefix is ~30 µs with the caches cold after a pass).

        A state too long for any prompt is refused at the first tokenize of it, which stops early: rendering once,
        the state's own tokenize is capped; on the library's path (which tokenizes whole prompts, one per question)
        a capped count of the state's text comes first. Either way the cost of a refusal is bounded by the limit."""
        rendered = None if images else self.once.render(decision, self.limits.max_context_tokens)
        if rendered is None:
            self.check_state_length(decision)
            rendered = self.once.with_state_end(self._library_prompts(decision, images))
        prompts = []
        for ids, marks, questions, prompt_images, state_end, system_end in rendered:
            if len(ids) > self.limits.max_context_tokens:
                loc = ["body", "questions", questions[0].name] if len(questions) == 1 else ["body", "questions"]
                who = f"question {questions[0].name!r}" if len(questions) == 1 else "the questions"
                raise InvalidRequest(
                    f"{who} with the state makes a prompt of {len(ids)} tokens; this server's context limit is "
                    f"{self.limits.max_context_tokens} tokens per prompt (state + question). Nothing was truncated: "
                    "shorten the state.",
                    loc=loc,
                    kind="context_length_exceeded",
                )
            reads = [
                Read(int(mark) - 1, self.label_ids(q.labels), float(self.config.temperature.get(q.type, 1.0)))
                for q, mark in zip(questions, marks)
            ]
            prompts.append(Prompt(ids, reads, prompt_images, state_end, system_end))
        total = processed_tokens(prompts)
        if total > self.limits.max_request_tokens:
            raise InvalidRequest(
                f"the request needs {total} tokens (shared state counted once); this server's limit is "
                f"{self.limits.max_request_tokens} per request. Split the questions over several requests.",
                loc=["body", "questions"],
                kind="context_length_exceeded",
            )
        return prompts, total

    def check_state_length(self, decision: Decision) -> None:
        state = decision.state
        text = state if isinstance(state, str) else json.dumps(state, ensure_ascii=False, default=str)
        encode = lambda piece: self.tokenizer.encode(piece, add_special_tokens=False)  # noqa: E731
        if capped_tokens(encode, text, self.limits.max_context_tokens, self.longest_token) is None:
            raise state_too_long(decision, self.limits.max_context_tokens)

    def _library_prompts(self, decision: Decision, images: dict | None = None) -> list[RenderedPrompt]:
        """`prepare_inputs`' prompts: the reference rendering (it marks neither end)."""
        request = {"state": decision.state, "questions": decision.raw_questions}
        if images:
            request["assets"] = images
        shared = {}
        return [
            RenderedPrompt(
                inputs["input_ids"][0].tolist(), inputs["marks"].tolist(), questions, split_images(inputs, shared)
            )
            for inputs, questions in prepare_inputs(self.config, request, self.processor or self.tokenizer)
        ]


# `/v1/decisions` renders a list of messages as the state "role: text" items, "\n\n" between them
SYSTEM_ROLES = ("system: ", "developer: ")
LATER_ROLES = ("user: ", "assistant: ", "tool call: ", "tool output: ")
MIN_SYSTEM_CHARS = 256  # a shorter system prompt isn't worth a saved state (~0.4 MiB of DeltaNet state each)


def system_prompt_end(state: str) -> int:
    """Where the system (and developer) messages leading a transcript state end: the start of its first later
    message (0: the state doesn't start with a long enough system message). Agents re-send one system prompt with
    new conversations, and a recurrent state exists only where one was saved, so the cache saves one there."""
    if not state.startswith(SYSTEM_ROLES):
        return 0
    cuts = [i + 2 for role in LATER_ROLES if (i := state.find("\n\n" + role)) >= 0]
    cut = min(cuts, default=0)
    return cut if cut >= MIN_SYSTEM_CHARS else 0


def state_too_long(decision: Decision, limit: int) -> InvalidRequest:
    """Every question's prompt is over the limit then: named as the full check names it, by its first question."""
    return InvalidRequest(
        f"the state alone is over this server's context limit of {limit} tokens per prompt (state + question). "
        "Nothing was truncated: shorten the state.",
        loc=["body", "questions", decision.questions[0].name],
        kind="context_length_exceeded",
    )


class OnceRenderer:
    """The generic prompt of a text-only decision, rendered once per state and once per distinct question.

    `prepare_inputs` renders, per question, `chat(text(state) + "\\n\\n" + question part)` and encodes it whole.
    The chat template puts the user text verbatim between a fixed head and tail (checked at start-up), the question
    part does not depend on the state, and the prompt is cut where the tokenizer cuts anyway (after the state's
    "\\n\\n", before a question part that starts with a non-space character: see `PrefixReusingEncoder`), so

        ids = encode(head + text(state) + "\\n\\n") + encode(question part + tail)

    with the second half kept per question (an LRU: the same questions asked about new states cost nothing). The
    length of the first half is the prompt's `state_end`: where the prefix-state cache saves a state. User text that
    holds a control token (or the sanitizer's markers) takes the library's path: sanitizing would change it.

    The first half is the only tokenize of the state, so it is the one that counts it against the context limit:
    capped (`blink.tokens.capped_tokens`), a state past the limit is refused after tokenizing at most about the limit.
    The first halves of recent states are kept too (an LRU bounded by their size): a state asked about again, the
    case the prefix-state cache makes cheap, is not tokenized again (a 1,000-token state: ~3 ms, as long as the
    pass over a question's 23 tokens).
    """

    MAX_QUESTIONS = 4096  # distinct question parts remembered
    MAX_STATE_BYTES = 32 << 20  # the states remembered: at most 4 bytes a character of text and 4 an id
    PROBES = ("PROBE", "  two \n\n lines  \n")

    def __init__(self, tokenizer, config: DecisionConfig, longest_token: int):
        self.tokenizer = tokenizer
        self.config = config
        self.longest_token = longest_token
        self.enabled = config.chat_template is None and getattr(tokenizer.encode, "enabled", False)
        self.question_template = _compile_jinja_template(DECISION_PROMPT)
        macro = DECISION_PROMPT.split("-%}", 1)[0] + "-%}"  # the template's own `text(x)` macro
        self.state_template = _compile_jinja_template(macro + "{{- text(state) -}}")
        self.control = any_of([*tokenizer.added_tokens_encoder, _CONTROL_TOKEN_START, _CONTROL_TOKEN_END])
        self.parts: OrderedDict = OrderedDict()  # the question's fields as JSON: its part
        self.parts_by_id: OrderedDict = OrderedDict()  # id(question): (question, its part)
        self.states: OrderedDict[str, tuple[array, int, int]] = OrderedDict()  # state: (head ids, system end, size)
        self.state_bytes = 0
        self.lock = threading.Lock()
        self.head = self.tail = ""
        if self.enabled:
            chats = [self._chat(probe) for probe in self.PROBES]
            self.head, _, self.tail = chats[0].partition(self.PROBES[0])
            self.enabled = all(chat == self.head + probe + self.tail for chat, probe in zip(chats, self.PROBES))

    def _chat(self, content: str) -> str:
        return self.tokenizer.apply_chat_template(
            [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True, enable_thinking=False
        )

    def _has_control(self, text: str) -> bool:
        return self.control is not None and self.control.search(text) is not None

    def render(self, decision: Decision, max_tokens: int | None = None) -> list[RenderedPrompt] | None:
        """One prompt per question, or None where the library must render. A state whose chat head alone passes
        `max_tokens` is refused (422)."""
        if not self.enabled:
            return None
        # a string is its own text (the template's `text(x)`: `x if x is string`), without a template run (~50 µs)
        state = decision.state if isinstance(decision.state, str) else self.state_template.render(state=decision.state)
        if self._has_control(state):
            return None
        parts = [self._part(q) for q in decision.questions]
        if any(part is None for part in parts):
            return None
        found = self._state_head(state, max_tokens)
        if found is None:
            raise state_too_long(decision, max_tokens)
        head, system_end = found
        out = []
        for q, part in zip(decision.questions, parts):
            ids = head + part
            out.append(RenderedPrompt(ids, [len(ids)], [q], [], len(head), system_end))
        return out

    def _state_head(self, state: str, max_tokens: int | None) -> tuple[list[int], int] | None:
        """The ids of the chat head and `state` with the end of its system prompt, or None past `max_tokens`:
        remembered for a state seen before, else tokenized (capped) and remembered if it fits."""
        with self.lock:
            known = self.states.get(state)
            if known is not None:
                self.states.move_to_end(state)
        if known is not None:
            ids, system_end, _ = known
            return (list(ids), system_end) if max_tokens is None or len(ids) <= max_tokens else None
        head = self._head_ids(self.head + state + "\n\n", max_tokens)
        if head is None:
            return None
        system_end = self._system_end(state, head)
        size = 4 * (len(state) + len(head))
        if size <= self.MAX_STATE_BYTES:
            with self.lock:
                if state not in self.states:
                    self.states[state] = (array("i", head), system_end, size)
                    self.state_bytes += size
                while self.state_bytes > self.MAX_STATE_BYTES:
                    self.state_bytes -= self.states.popitem(last=False)[1][2]
        return head, system_end

    def _system_end(self, state: str, head: list[int]) -> int:
        """The tokens of the chat head and the system prompt leading `state` (0: none), when they are where `head`
        starts (they are: the cut is a safe one, after "\n\n" before a role's letter; checked anyway)."""
        cut = system_prompt_end(state)
        if not cut:
            return 0
        ids = self.tokenizer.encode(self.head + state[:cut], add_special_tokens=False)
        return len(ids) if len(ids) < len(head) and head[: len(ids)] == ids else 0

    def with_state_end(self, rendered: list[RenderedPrompt]) -> list[RenderedPrompt]:
        """The library's prompts (images among them) with the state's end marked where it can be found: every
        prompt ends with its question's part as rendering once tokenizes it, and what comes before is the same in
        all of them. Only a save point: a prefix cut elsewhere would be looked up under other tokens, never misread
        (image tokens are keyed by their image's hash, see `Executor._keys`)."""
        if not self.enabled:
            return rendered
        ends = []
        for row in rendered:
            one = len(row.questions) == 1 and row.marks == [len(row.ids)]
            part = self._part(row.questions[0]) if one else None
            ends.append(len(row.ids) - len(part) if part and row.ids[len(row.ids) - len(part) :] == part else 0)
        first = rendered[0].ids[: ends[0]]
        if not ends[0] or any(end != ends[0] or row.ids[:end] != first for end, row in zip(ends, rendered)):
            return rendered
        return [row._replace(state_end=ends[0], system_end=0) for row in rendered]

    def _head_ids(self, text: str, max_tokens: int | None) -> list[int] | None:
        """`text`'s ids, or None past `max_tokens` (found in time bounded by the limit). `capped_tokens` ends, when
        the text fits, with one encode of the whole text: those ids are kept, so a state is tokenized once."""
        encode = lambda piece: self.tokenizer.encode(piece, add_special_tokens=False)  # noqa: E731
        if max_tokens is None:
            return encode(text)
        last = {}

        def counted(piece: str) -> list[int]:
            last["text"], last["ids"] = piece, encode(piece)
            return last["ids"]

        if capped_tokens(counted, text, max_tokens, self.longest_token) is None:
            return None
        return last["ids"] if last.get("text") == text else encode(text)

    def _part(self, question) -> list[int] | None:
        """The token ids of one question part and the chat tail (None: it can't be cut from the state).

        The question memo hands out one parse per question, so a question asked again is found by its identity
        first, without building its key (~2 µs a question); the entry holds the question, so its id is not reused
        while the entry lives."""
        with self.lock:
            known = self.parts_by_id.get(id(question))
            if known is not None and known[0] is question:
                self.parts_by_id.move_to_end(id(question))
                return known[1]
        ids = self._part_by_content(question)
        with self.lock:
            self.parts_by_id[id(question)] = (question, ids)
            while len(self.parts_by_id) > self.MAX_QUESTIONS:
                self.parts_by_id.popitem(last=False)
        return ids

    def _part_by_content(self, question) -> list[int] | None:
        key = json.dumps(
            [question.type, question.instructions, question.options, question.labels, question.descriptions],
            ensure_ascii=False,
            default=repr,
        )
        with self.lock:
            if key in self.parts:
                self.parts.move_to_end(key)
                return self.parts[key]
        text = self.question_template.render(state=None, question=question)
        if not text.startswith("\n\n") or len(text) < 3 or text[2].isspace() or self._has_control(text):
            ids = None
        else:
            ids = self.tokenizer.encode(text[2:] + self.tail, add_special_tokens=False)
        with self.lock:
            self.parts[key] = ids
            while len(self.parts) > self.MAX_QUESTIONS:
                self.parts.popitem(last=False)
        return ids

    def self_test(self, library) -> bool:
        """True when this rendering equals the library's on a few requests (run once at start-up)."""
        from transformers.decision import parse_questions

        raw = {
            "route": {"type": "choice", "instructions": "Which team?", "criteria": {"a": "x", "b": None}},
            "ok": {"type": "noul", "instructions": "Is it fine?"},
            "level": {"type": "score", "criteria": ["low", "high"]},
        }
        for state in ("Order 4471 arrived broken.\n", {"order": 4471, "note": "caf\u00e9 <b>"}, "  x  "):
            decision = Decision(state, parse_questions(raw, self.config), raw)
            fast = self.render(decision)
            if fast is not None and [row[:2] for row in fast] != [row[:2] for row in library(decision)]:
                return False
        with self.lock:
            self.parts.clear()
            self.parts_by_id.clear()
        return True
