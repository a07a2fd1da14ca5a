"""Answers: TypeSafe's shapes and formulas, clean distributions, determinism, wide choices, own errors."""

from __future__ import annotations

import math
import time

import pytest

from blink.errors import InvalidRequest, StartupError
from helpers import assert_close

REQUEST = {
    "state": {"message": "I was charged twice. Please fix this today."},
    "questions": {
        "refund": {"type": "noul", "instructions": "Is the customer asking for money back?"},
        "team": {
            "type": "choice",
            "instructions": "Which team?",
            "criteria": {"billing": "Charges", "technical": None, "sales": {"scope": ["quotes", "plans"]}},
        },
        "anger": {
            "type": "score",
            "instructions": "How frustrated?",
            "criteria": ["Calm", {"level": "annoyed"}, ["very", "angry"]],
        },
        "one-sided": {"type": "noul", "criteria": {"true": "The customer wants a refund"}},
    },
}


def test_answer_shapes_and_formulas(engine):
    answers = engine.decide(REQUEST)
    assert list(answers) == list(REQUEST["questions"])  # request order
    assert list(answers["refund"]) == ["type", "noul"]
    choice = answers["team"]
    assert list(choice) == ["type", "choice", "confidence", "probabilities"]
    p = choice["probabilities"]
    assert abs(math.fsum(p.values()) - 1) < 1e-6
    n, top = len(p), max(p.values())
    assert choice["choice"] == max(p, key=p.get)
    assert abs(choice["confidence"] - (top - 1 / n) / (1 - 1 / n)) < 1e-9
    score = answers["anger"]
    assert list(score) == ["type", "score", "confidence", "legend", "probabilities"]
    assert score["legend"] == {"0": "Calm", "1": {"level": "annoyed"}, "2": ["very", "angry"]}
    sp = [score["probabilities"][str(i)] for i in range(3)]
    assert abs(math.fsum(sp) - 1) < 1e-6
    assert abs(score["score"] - sum(i * x for i, x in enumerate(sp))) < 1e-9
    mode = max(range(3), key=lambda i: sp[i])
    mad = sum(abs(i - 1) for i in range(3)) / 3
    assert abs(score["confidence"] - max(0.0, 1 - sum(x * abs(i - mode) for i, x in enumerate(sp)) / mad)) < 1e-9
    for a in answers.values():
        for value in a.values():
            if isinstance(value, float):
                assert math.isfinite(value)


def test_deterministic(engine):
    assert engine.decide(REQUEST) == engine.decide(REQUEST)


def test_255_options_are_answered(engine):
    options = {f"option number {i}": None for i in range(255)}
    answers = engine.decide({"state": "pick one", "questions": {"wide": {"type": "choice", "criteria": options}}})
    p = answers["wide"]["probabilities"]
    assert list(p) == list(options) and abs(math.fsum(p.values()) - 1) < 1e-6
    # every option is read from ONE position with its own single-token label
    prepared = engine.prepare({"state": "pick one", "questions": {"wide": {"type": "choice", "criteria": options}}})
    (read,) = prepared.prompts[0].reads
    assert len(set(read.label_ids)) == 255


def test_limits_locate_the_question(engine):
    with pytest.raises(InvalidRequest) as info:
        engine.prepare(
            {
                "state": "s",
                "questions": {
                    "ok": {"type": "noul"},
                    "wide": {"type": "choice", "criteria": {str(i): None for i in range(256)}},
                },
            }
        )
    assert info.value.loc == ["body", "questions", "wide"] and info.value.kind == "too_many_options"


def test_score_gives_each_request_its_own_outcome(engine):
    good = engine.prepare(REQUEST).prompts
    from blink.plan import Prompt, Read

    broken = [Prompt([1, 2, 3], [Read(2, [10**9])])]  # a label id past the vocabulary: this one request fails
    out = engine.score([good, broken, good])
    assert [scored.error is None for scored in out] == [True, False, True]
    assert_close(out[0].scores, out[2].scores)  # two rows of one batch: within blink's 1e-6
    assert len({scored.compute_s for scored in out}) == 1 and out[0].compute_s > 0  # the one call's seconds


def test_an_error_keeps_its_type_across_the_gpu_boundary(engine):
    """What a ZeroGPU worker sends back is pickled: a failed request's error arrives as its own BlinkError
    subclass, with its status, location and kind, and is raised where the outcome is read."""
    import pickle

    from blink.errors import EngineFailure
    from blink.plan import Prompt, Read, Scored

    broken = [Prompt([1, 2, 3], [Read(2, [10**9])])]
    (scored,) = pickle.loads(pickle.dumps(engine.score([broken])))
    assert type(scored.error) is EngineFailure and scored.error.status == 500
    assert scored.error.message.startswith("the model failed on this request: IndexError")
    with pytest.raises(EngineFailure):
        scored.result()
    refused = InvalidRequest("too many questions", loc=["body", "questions", "q7"], kind="too_many_questions")
    back = pickle.loads(pickle.dumps(Scored(error=refused, compute_s=0.5)))
    assert type(back.error) is InvalidRequest and back.compute_s == 0.5
    assert (back.error.status, back.error.loc, back.error.kind) == (
        422,
        ["body", "questions", "q7"],
        "too_many_questions",
    )


def decision_context(engine, window_ms: float, admission=None):
    """A Context over the demo engine in this process, for `decide_body`: the path every decision entry point takes
    (check, admit, plan, batch, answer), without HTTP."""
    from blink.backend import LocalBackend
    from blink.context import Context
    from blink.decide.service import DecisionService
    from blink.web.admission import Admission

    service = DecisionService(engine, LocalBackend(engine, None), window_ms=window_ms, max_batch=16)
    return Context(service=service, chats=None, served_name="demo", admission=admission or Admission.standard())


def test_the_service_gives_each_request_its_own_answers_or_error(engine):
    """The routes' path (prepare -> batched score -> answer): requests scored in one call, a bad one refused on
    its own, the others answered as if alone."""
    import asyncio

    from blink.api.systemone import decide_body

    bad = {"state": "s", "questions": {"q": {"type": "boolean"}}}
    other = {"state": "another state entirely", "questions": {"x": {"type": "noul", "instructions": "Yes?"}}}
    ctx = decision_context(engine, window_ms=2000)

    async def together():
        return await asyncio.gather(*(decide_body(ctx, b) for b in (REQUEST, bad, other)), return_exceptions=True)

    out = asyncio.run(together())
    batcher = ctx.service.batcher
    assert batcher.batches == 1 and batcher.requests == 2  # the good two shared one call
    assert batcher.incoming == 0  # the one refused by its check is not waited for
    out = [o if isinstance(o, Exception) else o["answers"] for o in out]
    alone = engine.decide(REQUEST)  # batched with others: equal within float tolerance, not bit for bit
    assert abs(out[0]["refund"]["noul"] - alone["refund"]["noul"]) < 1e-5
    assert out[0]["team"]["choice"] == alone["team"]["choice"]
    assert isinstance(out[1], InvalidRequest) and out[1].loc == ["body", "questions", "q"]
    assert abs(out[2]["x"]["noul"] - engine.decide(other)["x"]["noul"]) < 1e-5


def test_a_window_waits_for_a_request_on_its_way_however_long_its_way(engine):
    """A request is counted on its way to the batcher from the moment its entry point takes it until it is
    queued, with no gap between its steps (check, a place, plan) where a window could close without it: here one
    of two requests waits for a place that frees only after the other is queued, and they still share a batch."""
    import asyncio

    from blink.api.systemone import decide_body
    from blink.web.admission import Admission, Policy

    other = {"state": "another state entirely", "questions": {"x": {"type": "noul", "instructions": "Yes?"}}}
    ctx = decision_context(engine, window_ms=5000, admission=Admission({"decide": Policy(2, wait_s=10)}))
    batcher = ctx.service.batcher

    async def together():
        async with ctx.admission.enter("decide"):  # one of the two places, held while the first is queued
            first = asyncio.ensure_future(decide_body(ctx, REQUEST))
            second = asyncio.ensure_future(decide_body(ctx, other))  # waits for a place
            deadline = time.perf_counter() + 3
            while batcher.incoming > 1 and time.perf_counter() < deadline:
                await asyncio.sleep(0.01)  # until the first is queued (its window open) and the second waits
            await asyncio.sleep(0.3)
        return await asyncio.gather(first, second)

    started = time.perf_counter()
    asyncio.run(together())
    assert batcher.batches == 1 and batcher.requests == 2
    assert time.perf_counter() - started < 5  # the window closed as the last request was queued, not at its end
    assert batcher.incoming == 0


def test_a_request_that_never_reaches_the_queue_stops_being_counted(engine):
    """A decision that never reaches the queue (no place for it, its client gone) stops being counted on its way
    as its exchange ends: later windows do not wait for it."""
    import asyncio

    from blink.api.systemone import decide_body
    from blink.errors import Overloaded
    from blink.web.admission import Admission, Policy

    ctx = decision_context(engine, window_ms=5000, admission=Admission({"decide": Policy(1)}))
    batcher = ctx.service.batcher

    async def refused_then_gone_then_alone():
        async with ctx.admission.enter("decide"):  # the only place is taken: the next decision is refused
            with pytest.raises(Overloaded):
                await decide_body(ctx, REQUEST)
        assert batcher.incoming == 0
        for steps in (0, 1, 2, 3):  # its client leaves at some step of its way (checked, admitted, planned)
            task = asyncio.ensure_future(decide_body(ctx, REQUEST))
            for _ in range(steps):
                await asyncio.sleep(0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert batcher.incoming == 0
        started = time.perf_counter()
        await decide_body(ctx, REQUEST)
        return time.perf_counter() - started

    assert asyncio.run(refused_then_gone_then_alone()) < 5  # a lone request's window did not wait for the others
    assert batcher.incoming == 0


def test_pass_settings_reach_the_executor(demo_dir):
    """--pass-cost-tokens / --pass-cache-mib (and their BLINK_* variables): `auto` keeps the device's default,
    a number reaches the executor, a bad value stops start-up with the variable named."""
    from blink.decide.planner import Engine
    from blink.executor.core import Executor
    from blink.model.loading import load
    from blink.server import build_context
    from blink.settings import Settings

    auto = Settings.from_values({}, env={"BLINK_PASS_COST_TOKENS": "auto"})
    assert auto.pass_cost_tokens is None and auto.pass_cache_mib is None
    settings = Settings.from_values(
        {"model": str(demo_dir)}, env={"BLINK_PASS_COST_TOKENS": "0", "BLINK_PASS_CACHE_MIB": "16"}
    )
    assert (settings.pass_cost_tokens, settings.pass_cache_mib) == (0.0, 16.0)
    with pytest.raises(StartupError, match="BLINK_PASS_COST_TOKENS"):
        Settings.from_values({}, env={"BLINK_PASS_COST_TOKENS": "-1"})

    ctx = build_context(settings, warmup=False)
    executor = ctx.planner.executor
    assert executor.pass_cost_tokens == 0.0
    assert executor.max_cells == 16 * 2**20 // executor.kv_bytes_per_token()
    assert ctx.current_health()["passes"] == {"pass_cost_tokens": 0.0, "max_rows": 64, "pass_cache_mib": 16}
    default = Engine(load(str(demo_dir))).executor  # CPU defaults
    assert default.pass_cost_tokens == Executor.PASS_COST_TOKENS["cpu"]
    assert default.max_cells == Executor.PASS_CACHE_BYTES["cpu"] // default.kv_bytes_per_token()


def test_small_text_decisions_are_planned_on_the_loop_and_the_rest_in_a_thread(engine):
    from blink.decide.planner import INLINE_PLAN_CHARS

    assert engine.check(REQUEST).inline
    assert not engine.check({**REQUEST, "state": "word " * INLINE_PLAN_CHARS}).inline
    assert not engine.check({**REQUEST, "state": {"rows": [{"n": i} for i in range(INLINE_PLAN_CHARS)]}}).inline
    assert not engine.check({**REQUEST, "x_order": "rotate"}).inline
    long_question = {"type": "noul", "instructions": "Is it? " * (INLINE_PLAN_CHARS // 7)}
    for _ in range(2):  # parsed, then from the question memo: its size is kept with it
        assert not engine.check({**REQUEST, "questions": {"q": long_question}}).inline
    # a decision made without `parse_decision` carries no count: its questions are counted where it is planned
    from blink.decide.questions import Decision

    assert engine.plans_inline(Decision("s", [], {"q": {"type": "noul"}}))
    assert not engine.plans_inline(Decision("s", [], {"q": long_question}))


def json_values():
    from hypothesis import strategies as st

    scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40)
    return st.recursive(
        scalars, lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=8), inner, max_size=6)
    )


def exact_size(value) -> int:
    if isinstance(value, str):
        return 1 + len(value)
    if isinstance(value, dict):
        return 1 + sum(len(k) for k in value) + sum(exact_size(v) for v in value.values())
    if isinstance(value, list):
        return 1 + sum(exact_size(v) for v in value)
    return 1


def test_text_size_is_exact_up_to_its_budget_and_reads_no_further():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from blink.decide.questions import text_size

    @settings(max_examples=300, deadline=None)
    @given(json_values(), st.integers(0, 300))
    def exact_below_the_budget(value, budget):
        size, exact = text_size(value, budget), exact_size(value)
        assert size == exact if exact <= budget else size > budget

    exact_below_the_budget()

    read = []

    class Watched(dict):  # counts the values the walk takes
        def values(self):
            for value in super().values():
                read.append(value)
                yield value

    assert text_size(Watched((str(i), i) for i in range(100_000)), 64) > 64
    assert len(read) <= 65
