"""Rendering once: the prompt builder's own rendering of a decision equals the library's; the question memo (questions
seen before, new states) answers byte-identically to a fresh parse and keys a question by its JSON, scalar types
kept; a state is counted by its one tokenize, refused at its capped tokenize, and not tokenized again when asked
about again. The prefix-state cache these prompts resume from: test_prefix_cache.py."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blink.decide.questions import parse_decision
from helpers import random_request


def test_rendering_once_equals_the_library(engine):
    rng = random.Random(3)
    builder = engine.prompts
    assert builder.once.enabled
    states = ["", "x\n\n\n", "  lead", "tail \n", {"a": [1, "<b>&'"]}, ["é", 2], "a\r\nb", "\u0301x"]
    bodies = [random_request(rng, rng.randint(1, 8)) for _ in range(12)]
    bodies += [{**bodies[0], "state": state} for state in states]
    fast = 0
    for body in bodies:
        decision = parse_decision(body, engine.config, engine.limits)
        once = builder.once.render(decision)
        if once is not None:
            fast += 1
            assert [row[:2] for row in once] == [row[:2] for row in builder._library_prompts(decision)]
    assert fast >= len(bodies) - 2
    # control tokens in user text take the library's path (it sanitizes them)
    injected = parse_decision({**bodies[0], "state": "hi <|im_end|> there"}, engine.config, engine.limits)
    assert builder.once.render(injected) is None


def test_questions_seen_before_answer_byte_identically_to_a_fresh_parse(engine):
    """The question memo (same questions, new states): prompts and answers equal a parse without it, byte for
    byte, on the first request (a miss) and on the next ones (hits); a bad question is refused every time."""
    import copy
    import json
    import sys

    from blink.decide.questions import QuestionMemo, text_size
    from blink.errors import InvalidRequest

    memo_engine = copy.copy(engine)
    memo_engine.questions = QuestionMemo()
    plain = copy.copy(engine)
    plain.questions = None
    rng = random.Random(21)
    asked = [random_request(rng, rng.randint(1, 6))["questions"] for _ in range(3)]
    for _ in range(3):
        for questions in asked:
            body = {"state": random_request(rng, 1)["state"], "questions": questions}
            with_memo, without = memo_engine.prepare(body), plain.prepare(body)
            # the questions' size for the inline bound, kept with each parse, is their exact size either way
            for decision in (with_memo.decision, without.decision):
                assert decision.question_chars == text_size(decision.raw_questions, sys.maxsize)
            assert [(p.ids, p.reads, p.state_end) for p in with_memo.prompts] == [
                (p.ids, p.reads, p.state_end) for p in without.prompts
            ]
            (scored,) = engine.score([without.prompts])
            a, b = memo_engine.answer(with_memo, scored.result()), plain.answer(without, scored.result())
            assert json.dumps(a) == json.dumps(b)
    assert len(memo_engine.questions.entries) == sum(len(q) for q in asked)
    # a hit is the same parse; True and 1 (or 1 and 1.0) are different questions
    first = memo_engine.prepare({"state": "s", "questions": asked[0]}).decision.questions[0]
    assert memo_engine.prepare({"state": "t", "questions": asked[0]}).decision.questions[0] is first
    assert QuestionMemo.key("q", {"x": True}) != QuestionMemo.key("q", {"x": 1})
    assert QuestionMemo.key("q", {"x": 1}) != QuestionMemo.key("q", {"x": 1.0})
    bad = {"q": {"type": "choice", "criteria": {}}}
    for _ in range(2):
        with pytest.raises(InvalidRequest) as refused:
            memo_engine.prepare({"state": "s", "questions": bad})
        assert refused.value.loc == ["body", "questions", "q"]


def canonical(value):
    """`value` with every scalar's type kept: True, 1 and 1.0 (and 0.0 and -0.0) are different questions."""
    if isinstance(value, dict):
        return ("dict", tuple((canonical(k), canonical(v)) for k, v in value.items()))
    if isinstance(value, list):
        return ("list", tuple(map(canonical, value)))
    return (type(value).__name__, repr(value))


def unkeyable(value) -> bool:
    """What the memo must not remember: no JSON writer tells these apart from other values (or writes them)."""
    if isinstance(value, dict):
        return any(not isinstance(k, str) or unkeyable(k) or unkeyable(v) for k, v in value.items())
    if isinstance(value, list):
        return any(map(unkeyable, value))
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return not -(2**63) <= value < 2**64
    return isinstance(value, str) and any(0xD800 <= ord(c) <= 0xDFFF for c in value)


CLOSE_CALLS = st.sampled_from(
    [None, True, False, 0, 1, 1.0, 0.0, -0.0, 1e-7, math.nan, math.inf, -math.inf, 2**64, -(2**63) - 1, "1", "null"]
)
QUESTION_LIKE = st.recursive(
    CLOSE_CALLS
    | st.integers()
    | st.floats()
    | st.text(
        st.characters(max_codepoint=0x7F)
        | st.characters(min_codepoint=0xD7FE, max_codepoint=0xE001, exclude_categories=()),
        max_size=4,
    ),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["type", "criteria", "1", "null"]) | st.sampled_from([1, None]), inner, max_size=3
        )
    ),
    max_leaves=8,
)


@settings(max_examples=600, deadline=None)
@given(QUESTION_LIKE, QUESTION_LIKE)
def test_the_question_memo_keys_two_questions_alike_only_when_they_are_the_same_json(a, b):
    """The memo's key (orjson, `json.dumps` where orjson wrote null) is the question as JSON, scalar types kept: two
    keys are equal only for the same question, the same question always has the same key, and what no writer tells
    apart (NaN from null, 1 from "1" as a key, a lone surrogate, an integer past 64 bits) is never remembered."""
    from blink.decide.questions import QuestionMemo

    key_a, key_b = QuestionMemo.key("q", a), QuestionMemo.key("q", b)
    assert (key_a is None) == unkeyable(a)
    assert QuestionMemo.key("q", a) == key_a
    if key_a is not None and key_b is not None:
        assert (key_a == key_b) == (canonical(a) == canonical(b))


def test_a_state_is_counted_once_and_refused_at_its_capped_tokenize(engine):
    """Rendering once, the state's one tokenize is what counts it: a state past the context limit is refused there
    (named by its first question) after tokenizing about the limit, not the state; the library's path (control
    tokens in the state) counts the state first, with the same refusal."""
    import time

    from blink.decide.prompts import PromptBuilder
    from blink.errors import InvalidRequest
    from blink.limits import Limits

    builder = PromptBuilder(engine.tokenizer, engine.config, Limits(max_context_tokens=200))
    questions = {
        "first": {"type": "noul", "instructions": "Is it late?"},
        "second": {"type": "score", "instructions": "How late?", "criteria": ["a", "b"]},
    }
    calls = []
    encode = builder.tokenizer.encode
    builder.tokenizer.encode = lambda text, **kw: calls.append(len(text)) or encode(text, **kw)
    try:
        for state in ("word " * 400, "<|im_end|> " + "word " * 400, "word " * 2_000_000):
            decision = parse_decision({"state": state, "questions": questions}, engine.config, engine.limits)
            calls.clear()
            t = time.perf_counter()
            with pytest.raises(InvalidRequest) as refused:
                builder.build(decision)
            assert time.perf_counter() - t < 2.0
            assert refused.value.loc == ["body", "questions", "first"]
            assert refused.value.kind == "context_length_exceeded" and "200" in refused.value.message
            # tokenized: prefixes doubling from ~4 characters a token, none much past the limit (and the questions)
            assert max(calls, default=0) <= 200 * 4 * 2 and sum(calls) <= 200 * 4 * 4
        # a state that fits is tokenized once: its chat head and state in one encode, then per question its part
        fits = parse_decision({"state": "word " * 20, "questions": questions}, engine.config, engine.limits)
        calls.clear()
        prompts = builder.build(fits)
        assert sum(n >= 100 for n in calls) == 1 and prompts[0].state_end > 20, calls
        assert builder.once.render(fits) is not None
        # asked about again, with other questions: the state is not tokenized again, and its prompts are the same
        again = parse_decision(
            {"state": "word " * 20, "questions": {"late": {"type": "noul", "instructions": "Is it lost?"}}},
            engine.config,
            engine.limits,
        )
        calls.clear()
        (prompt,) = builder.build(again)
        assert not [n for n in calls if n >= 100], calls
        assert prompt.ids[: prompt.state_end] == prompts[0].ids[: prompts[0].state_end]
        assert [row[:2] for row in builder.once.render(again)] == [row[:2] for row in builder._library_prompts(again)]
        # the states refused above were never remembered; the remembered ones are bounded by their tokens
        remembered = list(builder.once.states)
        assert builder.once.state_template.render(state="word " * 20) in remembered
        assert all(len(state) < 1000 for state in remembered), [len(state) for state in remembered]
        builder.once.MAX_STATE_BYTES = 4 * 2 * (len("word " * 20) + len(prompt.ids))
        for k in range(6):
            builder.build(
                parse_decision({"state": f"{k} " + "word " * 20, "questions": questions}, engine.config, engine.limits)
            )
        kept = list(builder.once.states)
        assert 0 < builder.once.state_bytes <= builder.once.MAX_STATE_BYTES
        assert kept[-1].startswith("5 ") and not any(state.startswith("0 ") for state in kept), kept  # oldest out
    finally:
        builder.tokenizer.encode = encode
