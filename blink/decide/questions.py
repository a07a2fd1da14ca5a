"""Parsing and validating System One requests (`state` + `questions`) against the limits.

The question shapes and their validation are `transformers.decision`'s (`Question.from_request`); this
module adds what a server needs around them: limits, locations (`["body","questions",<id>]`) for 422s,
leniency the live API has (unknown fields ignored), and refusals for what we don't serve (`box`).

Traffic asks the same questions about new states, and the library's strict dataclasses validate every field of
every question on every request (~20 us each). `QuestionMemo` keeps each valid question's parse, keyed by its id
and its JSON exactly as sent, so a question seen before is not validated again (errors are never kept: a bad
question is checked, and refused, every time).
"""

from __future__ import annotations

import json
import sys
import threading
from collections import OrderedDict
from dataclasses import dataclass
from itertools import islice
from typing import Any

import orjson
from transformers.decision import DecisionConfig, Question

from blink.decide.x_fields import requested_calibration, requested_order, requested_raw
from blink.errors import InvalidRequest
from blink.limits import Limits

QUESTION_FIELDS = {"type", "instructions", "criteria"}


@dataclass
class Decision:
    """A validated decision: the state and the questions in request order (their ids are `q.name`)."""

    state: Any
    questions: list[Question]
    raw_questions: dict  # the questions as rendered: unknown fields dropped, request order kept
    raw_probabilities: bool = False  # `x_calibration: "raw"`: no calibration temperature
    order: str | None = None  # `x_order`; None: the server's default
    calibration: str | None = None  # `x_calibration` (fitted, prior, fitted+prior, raw); None: the server's default
    # `text_size(raw_questions)`, exact: each question's counted once, when it is parsed (the memo keeps it); None
    # for a decision not made by `parse_decision`
    question_chars: int | None = None


def text_size(value, budget: int) -> int:
    """The characters of a JSON value's strings and keys (and one per value), counted only until they pass `budget`:
    the work is bounded by the budget, not by the value."""
    size, stack = 0, [value]
    while stack and size <= budget:
        item = stack.pop()
        size += 1
        if isinstance(item, str):
            size += len(item)
        elif isinstance(item, dict):
            size += sum(len(key) for key in islice(item, budget) if isinstance(key, str))
            stack.extend(islice(item.values(), budget))
        elif isinstance(item, list):
            stack.extend(islice(item, budget))
    return size


def _question_error(qid: str, message: str, kind: str = "value_error") -> InvalidRequest:
    return InvalidRequest(f"question {qid!r}: {message}", loc=["body", "questions", qid], kind=kind)


def parse_question(qid: str, raw: Any, config: DecisionConfig, limits: Limits) -> tuple[Question, dict, int]:
    """The question, the fields of it that are rendered, and their `text_size` (exact: the library's validation has
    just read all of it)."""
    if not isinstance(raw, dict):
        raise _question_error(qid, f"a question is an object with a `type`, got {type(raw).__name__}")
    kind = raw.get("type")
    if kind == "box":
        raise _question_error(
            qid,
            "`box` questions need a vision model; this server answers noul, choice and score",
            kind="unsupported_question_type",
        )
    if kind not in Question.questions_schemes:
        raise _question_error(qid, f"`type` must be one of noul, choice, score; got {kind!r}", kind="union_tag_invalid")
    # the live API (pydantic) ignores fields it doesn't know; so do we
    question = {key: value for key, value in raw.items() if key in QUESTION_FIELDS}
    criteria = question.get("criteria")
    if kind == "noul" and isinstance(criteria, dict):
        question["criteria"] = {k: v for k, v in criteria.items() if k in ("true", "false")}
    if kind == "choice":
        _check_options(qid, criteria, limits)
    if kind == "score":
        _check_levels(qid, criteria, limits)
    try:
        parsed = Question.from_request(qid, question, config)
    except ValueError as error:
        message = str(error).removeprefix(f"Question {qid!r}: ")
        raise _question_error(qid, message) from None
    return parsed, question, text_size(question, sys.maxsize)


def _check_options(qid: str, criteria: Any, limits: Limits) -> None:
    """A choice question's `criteria`: a map of at least one and at most `max_options` options."""
    if not isinstance(criteria, dict):
        raise _question_error(qid, "a choice question's `criteria` maps option names to descriptions (or null)")
    if len(criteria) == 0:
        raise _question_error(qid, "a choice question needs at least one option in `criteria`")
    if len(criteria) > limits.max_options:
        raise _question_error(
            qid,
            f"{len(criteria)} options; this server answers at most {limits.max_options} per choice question",
            kind="too_many_options",
        )


def _check_levels(qid: str, criteria: Any, limits: Limits) -> None:
    """A score question's `criteria`: a list of one to `max_levels` levels, each a string, object or array."""
    if not isinstance(criteria, list):
        raise _question_error(qid, "a score question's `criteria` is a list of levels, lowest first")
    if len(criteria) == 0:
        raise _question_error(qid, "a score question needs at least one level in `criteria`")
    if len(criteria) > limits.max_levels:
        raise _question_error(
            qid,
            f"{len(criteria)} levels; this server answers at most {limits.max_levels} per score question",
            kind="too_many_levels",
        )
    for i, level in enumerate(criteria):
        if not isinstance(level, (str, dict, list)):
            raise InvalidRequest(
                f"question {qid!r}: level {i} must be a string, object or array, got "
                f"{'null' if level is None else type(level).__name__}",
                loc=["body", "questions", qid, "score", "criteria", i],
            )


class QuestionMemo:
    """Valid questions' parses, least recently used out past `max_entries`. The parses it hands out are shared
    between requests: read them, never change them (nothing does: rotations build new questions)."""

    def __init__(self, max_entries: int = 4096):
        self.max_entries = max_entries
        self.entries: OrderedDict[bytes | str, tuple[Question, dict, int]] = OrderedDict()
        self.lock = threading.Lock()  # requests are prepared in parallel threads

    @staticmethod
    def key(qid: str, raw: Any) -> bytes | str | None:
        """The question's id and JSON, or None (not remembered). orjson writes it in ~0.5 µs where `json.dumps`
        takes ~3.5 (~15 with the caches cold after a pass, a question each request). True and 1, 1 and 1.0 stay
        distinct in both. What orjson refuses is not remembered: a lone surrogate, an integer past 64 bits, a key
        that is not a string (`json.dumps` would write 1 and "1" alike). orjson writes NaN and the infinities as
        null (bodies refuse them, the UI's form does not), so a key holding null is written again by `json.dumps`,
        which refuses them."""
        try:
            key = orjson.dumps([qid, raw])
        except TypeError:  # orjson.JSONEncodeError is one
            return None
        if b"null" not in key:
            return key
        try:
            return json.dumps([qid, raw], ensure_ascii=False, allow_nan=False)
        except ValueError:
            return None

    def parse(self, qid: str, raw: Any, config: DecisionConfig, limits: Limits) -> tuple[Question, dict, int]:
        key = self.key(qid, raw)
        if key is None:
            return parse_question(qid, raw, config, limits)
        with self.lock:
            if (found := self.entries.get(key)) is not None:
                self.entries.move_to_end(key)
                return found
        parsed = parse_question(qid, raw, config, limits)
        with self.lock:
            self.entries[key] = parsed
            while len(self.entries) > self.max_entries:
                self.entries.popitem(last=False)
        return parsed


def parse_decision(body: Any, config: DecisionConfig, limits: Limits, memo: QuestionMemo | None = None) -> Decision:
    """Validate a System One body; raise `InvalidRequest` naming the field or question at fault. With a `memo` (one
    per config and limits), questions seen before are taken from it."""
    if not isinstance(body, dict):
        raise InvalidRequest(
            "the body must be a JSON object with `state` and `questions`", loc=["body"], kind="model_attributes_type"
        )
    if "state" not in body:
        raise InvalidRequest("`state` is required", loc=["body", "state"], kind="missing")
    state = body["state"]
    if not isinstance(state, (str, dict, list)):
        raise InvalidRequest(
            f"`state` must be a string, object or array, got {'null' if state is None else type(state).__name__}",
            loc=["body", "state"],
        )
    if "questions" not in body:
        raise InvalidRequest("`questions` is required", loc=["body", "questions"], kind="missing")
    questions = body["questions"]
    if not isinstance(questions, dict):
        raise InvalidRequest("`questions` maps question ids to questions", loc=["body", "questions"], kind="dict_type")
    if not questions:
        raise InvalidRequest("`questions` needs at least one question", loc=["body", "questions"], kind="too_short")
    if len(questions) > limits.max_questions:
        raise InvalidRequest(
            f"{len(questions)} questions; this server answers at most {limits.max_questions} per request",
            loc=["body", "questions"],
            kind="too_many_questions",
        )
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise InvalidRequest("`model` must be a string", loc=["body", "model"], kind="string_type")
    parse = memo.parse if memo is not None else parse_question
    parsed = {qid: parse(qid, q, config, limits) for qid, q in questions.items()}
    return Decision(
        state,
        [q for q, _, _ in parsed.values()],
        {qid: raw for qid, (_, raw, _) in parsed.items()},
        raw_probabilities=requested_raw(body),
        order=requested_order(body),
        calibration=requested_calibration(body),
        question_chars=1 + sum(len(qid) + chars for qid, (_, _, chars) in parsed.items()),
    )
