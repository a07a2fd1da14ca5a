"""The prefix-state cache and rendering once: answers with and without the cache are identical (fp32, <= 1e-6),
alone, in batches and under concurrent requests to a real server; the rendering equals the library's; usage
reports the tokens the cache spared."""

from __future__ import annotations

import math
import random
import tracemalloc
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blink.decide.questions import parse_decision
from blink.plan import Prompt
from helpers import check_resumes_share_and_keep_saved_states, random_request, worst


@pytest.fixture(scope="module")
def engines(engine):
    """The session's engine with a fresh cache, and one over the same model with the cache off."""
    from blink.decide.planner import Engine
    from blink.executor.prefix_cache import PrefixCache

    engine.executor.prefix_cache = PrefixCache(64 << 20)
    return engine, Engine(engine.loaded, prefix_cache_bytes=0)


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


def test_cached_answers_equal_uncached_alone_and_in_batches(engines):
    on, off = engines
    rng = random.Random(11)
    bodies = [random_request(rng, rng.randint(1, 3)) for _ in range(3)]
    cached, answers = [], []
    for _ in range(2):  # the second round finds every state saved
        for body in bodies:
            prepared = on.prepare(body)
            (a,), (b,) = on.score([prepared.prompts]), off.score([prepared.prompts])
            answers.append(on.answer(prepared, a.result()))
            assert worst(answers[-1], off.answer(prepared, b.result())) <= 1e-6
            assert b.cached_tokens == 0
            cached.append(a.cached_tokens)
    assert cached[:3] == [0] * 3 and all(cached[3:])
    assert answers[:3] == answers[3:]  # a repeat from the cache is bit-identical (the saved state is the same)
    # a batch mixing saved states and new ones, with a state twice
    mixed = [on.prepare(body) for body in bodies[:2] + [random_request(rng, 2), bodies[0]]]
    for prepared, a, b in zip(mixed, on.score([p.prompts for p in mixed]), off.score([p.prompts for p in mixed])):
        assert worst(on.answer(prepared, a.result()), off.answer(prepared, b.result())) <= 1e-6


def test_resumed_states_are_shared_and_stay_as_saved(engines):
    check_resumes_share_and_keep_saved_states(*engines, random.Random(21))


def test_the_longest_saved_start_is_resumed(engines):
    """A prompt whose save point lies past a saved one resumes from it and runs only the rest: exact."""
    on, _ = engines
    prepared = on.prepare(random_request(random.Random(5), 2))
    end = prepared.prompts[0].state_end
    short = [Prompt(p.ids, p.reads, p.images, end // 2) for p in prepared.prompts]
    first, _ = on.executor.score_reusing([short])
    scores, cached = on.executor.score_reusing([prepared.prompts])
    assert cached == [end // 2]
    for prompt, prompt_scores in zip(prepared.prompts, scores[0]):
        for ours, ref in zip(prompt_scores, on.executor.reference(prompt)):
            assert max(abs(x - y) for x, y in zip(ours, ref)) < 1e-5


def test_the_cache_stays_in_its_budget(engines):
    """Full to its budget, every new state evicts the least recently used ones, never more bytes than allowed."""
    on, _ = engines
    cache = on.executor.prefix_cache
    saved = cache.max_bytes
    try:
        for body in [random_request(random.Random(seed), 1) for seed in range(30, 32)]:
            on.decide(body)
        cache.max_bytes = cache.bytes  # full: the next save must evict
        order = list(cache.entries)
        for body in [random_request(random.Random(seed), 1) for seed in range(40, 44)]:
            on.decide(body)
            order += [key for key in cache.entries if key not in order]
            assert 0 < cache.bytes <= cache.max_bytes
            assert cache.bytes == sum(entry.nbytes for entry in cache.entries.values()) + cache.recent_bytes
        assert list(cache.entries) == order[-len(cache.entries) :] and len(cache.entries) < len(order)
    finally:
        cache.max_bytes = saved


def test_an_entry_counts_what_it_costs(engines):
    """An entry's counted bytes cover its tensors' whole storages (not their views' numel) and the Python heap that
    saving it keeps (tracemalloc: the layers' deep-copied objects and dicts, the tensors' objects, the key), so a
    full cache costs its budget, not ~1.3x it (bench/RESULTS.md, issue 44)."""
    from blink.executor import prefix_cache
    from blink.executor.prefix_cache import layer_tensors, storage_bytes

    on, _ = engines
    cache = on.executor.prefix_cache
    before = set(cache.entries)
    tracemalloc.start(64)
    try:
        for seed in range(50, 56):
            on.decide(random_request(random.Random(seed), 1))
        snapshot = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    new = [entry for key, entry in cache.entries.items() if key not in before]
    assert len(new) >= 6
    kept = snapshot.filter_traces([tracemalloc.Filter(True, prefix_cache.__file__, all_frames=True)])
    python_bytes = sum(stat.size for stat in kept.statistics("filename"))
    storages = [storage_bytes(t for _, _, t in layer_tensors(entry.cache)) for entry in new]
    for entry, stored in zip(new, storages):
        numel = sum(t.numel() * t.element_size() for _, _, t in layer_tensors(entry.cache))
        assert entry.nbytes > stored >= numel > 0
    assert sum(entry.nbytes for entry in new) >= sum(storages) + python_bytes > sum(storages)


def test_a_view_is_counted_with_the_storage_it_keeps_alive():
    """A saved tensor that is a view keeps its parent's whole storage: that is what is counted, once."""
    from types import SimpleNamespace

    import torch

    from blink.executor.prefix_cache import entry_bytes

    parent = torch.zeros(8, 1024)
    cache = SimpleNamespace(layers=[SimpleNamespace(keys=parent[:1], values=parent[1:2], conv_states={0: parent[2:3]})])
    counted = entry_bytes((1, 2, 3), cache)
    assert parent.untyped_storage().nbytes() < counted < 2 * parent.untyped_storage().nbytes()


@pytest.mark.e2e
def test_a_server_under_concurrent_requests(server):
    """Repeated and new states sent at once to a real server (its own cache): every answer equals the first one
    for its body, and usage says what the cache spared on both wires."""
    rng = random.Random(21)
    bodies = [random_request(rng, rng.randint(1, 4)) for _ in range(4)]
    with httpx.Client(base_url=server, timeout=120) as client:
        first = [client.post("/v1/systemone", json=body).json() for body in bodies]
        assert all(f["usage"].get("x_cached_tokens", 0) == 0 for f in first)

        def again(i):
            return i, client.post("/v1/systemone", json=bodies[i]).json()

        with ThreadPoolExecutor(8) as pool:
            for i, body in pool.map(again, [i % 4 for i in range(16)]):
                assert worst(body["answers"], first[i]["answers"]) <= 1e-6
                assert body["usage"]["x_cached_tokens"] > 0
        from typesafe_sdk import SystemOneResponse  # the SDK parses a body carrying the extension field

        raw = client.post("/v1/systemone", json=bodies[0])
        assert "x_cached_tokens" in raw.json()["usage"]
        assert SystemOneResponse.model_validate_json(raw.text).usage.input_tokens > 0
        health = client.get("/healthz").json()["prefix_cache"]
        assert health["active"] and health["hits"] >= 16 and health["used_mib"] > 0

        decision = {
            "model": "demo",
            "input": "The parcel never came and I want my money back.",
            "prompt_cache_key": "ticket-41",
            "questions": [{"type": "predicate", "instructions": "Is this a refund request?"}],
        }
        usage = [client.post("/v1/decisions", json=decision).json()["usage"] for _ in range(2)]
        assert usage[0]["input_tokens_details"]["cached_tokens"] == 0
        assert 0 < usage[1]["input_tokens_details"]["cached_tokens"] < usage[1]["input_tokens"]
        bad = client.post("/v1/decisions", json={**decision, "prompt_cache_key": 7})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "prompt_cache_key"


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


SYSTEM = (
    "You are the triage agent of a parcel company. Read the conversation, then answer each question about it from "
    "what the customer wrote, not from what the agent assumed. Damaged goods go to returns, charges to billing, "
    "late or lost parcels to shipping. Never guess an order number that is not in the text."
)


def transcript(user: str) -> str:
    """A state as `/v1/decisions` renders a system message and a user message."""
    return f"system: {SYSTEM}\n\nuser: {user}"


def test_a_new_state_after_a_system_prompt_seen_before_resumes_from_it(engines):
    """The end of a long system prompt is a save point: the next state after the same system prompt runs only
    past it (cached tokens = the system prompt's, with the chat head), exact against the cache off, alone and in a
    batch with other states."""
    on, off = engines
    rng = random.Random(31)
    users = [" ".join(rng.choice(SYSTEM.split()) for _ in range(rng.randint(5, 60))) for _ in range(4)]
    questions = random_request(rng, 3)["questions"]
    prepared = [on.prepare({"state": transcript(u), "questions": questions}) for u in users]
    system_end = prepared[0].prompts[0].system_end
    head = on.prompts.once.head
    assert system_end == len(on.prompts.tokenizer.encode(head + f"system: {SYSTEM}\n\n", add_special_tokens=False))
    assert all(p.system_end == system_end < p.state_end for x in prepared for p in x.prompts)
    (first,) = on.score([prepared[0].prompts])
    assert first.cached_tokens == 0
    (second,) = on.score([prepared[1].prompts])  # a new conversation after the same system prompt
    assert second.cached_tokens == system_end
    batch = on.score([p.prompts for p in prepared[2:]] + [prepared[0].prompts])
    assert [s.cached_tokens for s in batch] == [system_end, system_end, prepared[0].prompts[0].state_end]
    scored = [first, second, *batch[:2]]
    for p, a, b in zip(prepared, scored, off.score([p.prompts for p in prepared])):
        assert worst(on.answer(p, a.result()), off.answer(p, b.result())) <= 1e-6
    # a short system prompt, or a state that merely mentions one, has no save point of its own
    assert on.prepare({"state": "system: be brief\n\nuser: hi", "questions": questions}).prompts[0].system_end == 0
    assert on.prepare({"state": "user: " + SYSTEM, "questions": questions}).prompts[0].system_end == 0


@pytest.mark.e2e
def test_decisions_report_the_system_prompt_as_cached_for_a_new_conversation(server, engine):
    """/v1/decisions with a system message: a new user message after the same system prompt reports the system
    prompt's tokens as `input_tokens_details.cached_tokens`, and its answers equal a fresh server's reading (the
    in-process engine, cache off)."""
    from blink.api.openai.decisions import to_systemone
    from blink.decide.planner import Engine

    rng = random.Random(41)
    question = [{"type": "predicate", "name": "late", "instructions": "Is the parcel late?"}]
    bodies = [
        {
            "model": "demo",
            "input": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"ticket {rng.random()}"}],
            "questions": question,
        }
        for _ in range(2)
    ]
    system_end = engine.prepare(to_systemone(bodies[1], ["demo"]).body).prompts[0].system_end
    assert system_end > 40
    off = Engine(engine.loaded, prefix_cache_bytes=0)
    with httpx.Client(base_url=server, timeout=120) as client:
        got = [client.post("/v1/decisions", json=body).json() for body in bodies]
    assert got[1]["usage"]["input_tokens_details"]["cached_tokens"] == system_end
    expected = off.decide(to_systemone(bodies[1], ["demo"]).body)
    assert abs(got[1]["answers"][0]["probability"] - next(iter(expected.values()))["noul"]) <= 1e-6


def test_requests_about_saved_states_still_share_their_suffix_passes(engines):
    """A batch of requests whose states are all saved runs their suffixes in shared passes (the resumed caches
    stacked, KV left-padded), not one pass per request, and stays exact against the cache off."""
    on, off = engines
    rng = random.Random(51)
    words = SYSTEM.split()
    questions = random_request(rng, 2)["questions"]
    # the same questions about states of about one length: the cost model puts them in one or two passes
    prepared = [
        on.prepare({"state": " ".join(rng.choice(words) for _ in range(80)), "questions": questions}) for _ in range(4)
    ]
    on.score([p.prompts for p in prepared])  # every state saved
    forwards = []
    run = on.executor._forward
    on.executor._forward = lambda *args: forwards.append(args[0].shape[0]) or run(*args)
    try:
        again = on.score([p.prompts for p in prepared])
    finally:
        on.executor._forward = run
    assert all(s.cached_tokens == p.prompts[0].state_end for s, p in zip(again, prepared))
    assert len(forwards) <= 2 and max(forwards) >= 4, forwards  # one request alone would be 2 rows a pass at most
    for p, a, b in zip(prepared, again, off.score([p.prompts for p in prepared])):
        assert worst(on.answer(p, a.result()), off.answer(p, b.result())) <= 1e-6


def test_an_image_prefix_is_saved_keyed_by_its_pixels(demo_root):
    """A state with an image, asked new questions: resumed from its saved prefix (image tokens keyed by the image's
    hash) without running the vision tower again, exact against the cache off; the same state with another image
    of the same size shares nothing past the text before the image."""
    import base64

    from blink.decide.planner import Engine
    from blink.model.demo import demo_model_dir
    from blink.model.loading import load
    from helpers import png

    loaded = load(str(demo_model_dir(vision=True)), vision=True)
    on, off = Engine(loaded, prefix_cache_bytes=64 << 20), Engine(loaded, prefix_cache_bytes=0)

    def body(color, questions):
        data = base64.b64encode(png(color=color, size=(64, 64))).decode()
        return {
            "state": {"photo": "<image:p1>", "note": "What arrived today"},
            "questions": questions,
            "assets": {"<image:p1>": {"type": "image", "format": "png", "data_base64": data}},
        }

    rng = random.Random(61)
    asked = [random_request(rng, 2)["questions"] for _ in range(2)]
    requests = [body((200, 30, 30), asked[0]), body((200, 30, 30), asked[1]), body((30, 30, 200), asked[1])]
    prepared = [on.prepare(r) for r in requests]
    end = prepared[0].prompts[0].state_end
    assert end > 0 and prepared[1].prompts[0].state_end == end and prepared[0].prompts[0].images
    cached, towers, images = [], [], []
    hook = on.executor.vision.visual.register_forward_hook(lambda *_: images.append(1))  # the vision tower
    try:
        for p in prepared:
            images.clear()
            (a,) = on.score([p.prompts])
            towers.append(len(images))
            (b,) = off.score([p.prompts])
            assert worst(on.answer(p, a.result()), off.answer(p, b.result())) <= 1e-6
            cached.append(a.cached_tokens)
    finally:
        hook.remove()
    assert towers == [1, 0, 1]  # the image inside the resumed prefix is not run through the tower again
    assert prepared[2].prompts[0].ids == prepared[1].prompts[0].ids  # the blue image: the same ids as the red...
    assert cached == [0, end, 0]  # ...and another hash


def plain_logprobs_error(engine, ids: list[int], got) -> float:
    """How far a prompt's scores (prompt_logprobs) lie from a plain forward of it, log-softmaxed: its tokens'
    logprobs, its most likely tokens after the last, each token's rank within the tolerance."""
    import torch

    with torch.inference_mode():
        rows = torch.log_softmax(engine.executor.model(input_ids=torch.tensor([ids])).logits[0].float(), -1)
    assert len(got.token_logprobs) == len(ids) - 1 and len(got.top) == len(ids)
    worst_seen = 0.0
    for i, token in enumerate(ids[1:]):
        worst_seen = max(worst_seen, abs(got.token_logprobs[i] - rows[i, token].item()))
        if got.ranks:
            own = rows[i, token]
            assert int((rows[i] > own + 1e-5).sum()) + 1 <= got.ranks[i] <= int((rows[i] > own - 1e-5).sum()) + 1
    best = rows[-1].topk(len(got.top[-1]))
    assert [t for t, _ in got.top[-1]] == best.indices.tolist()
    return max([worst_seen] + [abs(lp - v) for (_, lp), v in zip(got.top[-1], best.values.tolist())])


@pytest.fixture
def scoring(engines):
    """The session's engine with an empty cache of 64 MiB (32-token blocks)."""
    from blink.executor.prefix_cache import PrefixCache

    on, _ = engines
    on.executor.prefix_cache = PrefixCache(64 << 20, 32)
    return on


def test_choices_sent_one_a_request_share_their_context_exactly(scoring):
    """lm-eval's choices, a prompt a request: the second resumes from the first's last block boundary in the context,
    the third and fourth from where the first two met (the context's end); every score equals a plain forward."""
    from blink.executor.prompt_logprobs import prompt_logprobs

    rng = random.Random(7)
    context = [rng.randrange(200, 5000) for _ in range(150)]
    prompts = [context + [rng.randrange(200, 5000) for _ in range(rng.randint(2, 6))] for _ in range(4)]
    cache, resumed = scoring.executor.prefix_cache, []
    for ids in prompts:
        before = cache.cached_tokens
        (got,) = prompt_logprobs(scoring.executor, [ids], 3, ranks=True)
        resumed.append(cache.cached_tokens - before)
        assert plain_logprobs_error(scoring, ids, got) < 1e-5
    assert resumed == [0, 128, 150, 150]
    assert 0 < cache.bytes <= cache.max_bytes
    # the four prompts' tokens, remembered to choose save points, are 4 bytes a token and counted in the budget
    assert len(cache.recent) == 4 and 4 * sum(map(len, prompts)) < cache.recent_bytes < 4 * sum(map(len, prompts)) + 400
    assert cache.bytes == sum(entry.nbytes for entry in cache.entries.values()) + cache.recent_bytes


def test_a_prompt_that_leaves_a_saved_start_is_scored_from_its_own_tokens(scoring):
    """Saved prefixes of one prompt do not lend their scores to another: a prompt sharing only the first block, one
    that leaves the context one token before a saved point, and requests asking more alternatives or ranks than the
    saved scores hold are exact; an answer asking less resumes."""
    from blink.executor.prompt_logprobs import prompt_logprobs

    rng = random.Random(8)
    context = [rng.randrange(200, 5000) for _ in range(140)]
    cache = scoring.executor.prefix_cache
    prompt_logprobs(scoring.executor, [context + [11, 12]], 2)  # saves 96 and 128, without ranks
    assert sorted(e.length for e in cache.entries.values()) == [96, 128]
    others = [
        context[:40] + [rng.randrange(200, 5000) for _ in range(100)],
        context[:127] + [7] + context[128:],
        context[:130] + [13, 14],
    ]
    asked = [(2, False), (2, False), (3, False), (2, True), (1, False)]
    expected = [0, 96, 0, 0, 132]  # where each resumes: not past a changed token, nor from fewer scores than asked
    for (top, ranks), ids, resumes in zip(asked, others + others[2:] * 2, expected):
        before = cache.cached_tokens
        (got,) = prompt_logprobs(scoring.executor, [ids], top, ranks=ranks)
        assert cache.cached_tokens - before == resumes
        assert plain_logprobs_error(scoring, ids, got) < 1e-5


def test_a_request_of_choices_saves_its_context_for_the_next(scoring):
    """The choices of one request save their shared context's end: the next request about it (a group, or a lone
    prompt) resumes there, exactly; the cache stays in its budget when new items evict the older ones."""
    from blink.executor.prompt_logprobs import prompt_logprobs

    rng = random.Random(9)
    context = [rng.randrange(200, 5000) for _ in range(100)]
    first = [context + [rng.randrange(200, 5000) for _ in range(3)] for _ in range(3)]
    later = [[context + [rng.randrange(200, 5000) for _ in range(4)] for _ in range(2)], [context[:70] + [5, 6]]]
    later.append([context + [9]])
    cache = scoring.executor.prefix_cache
    prompt_logprobs(scoring.executor, first, 1)
    assert [e.length for e in cache.entries.values()] == [100]
    for prompts, resumes in zip(later, [100, 0, 100]):  # a prompt leaving the context at 70 resumes from nothing
        before = cache.cached_tokens
        for ids, got in zip(prompts, prompt_logprobs(scoring.executor, prompts, 1)):
            assert plain_logprobs_error(scoring, ids, got) < 1e-5
        assert cache.cached_tokens - before == resumes
    cache.max_bytes = max(e.nbytes for e in cache.entries.values()) * 3
    for seed in range(4):
        item = random.Random(seed)
        prompt_logprobs(scoring.executor, [[item.randrange(200, 5000) for _ in range(70)]], 1)
        assert 0 < cache.bytes <= cache.max_bytes
        assert cache.bytes == sum(entry.nbytes for entry in cache.entries.values()) + cache.recent_bytes


@pytest.mark.e2e
def test_echo_reports_the_start_a_saved_state_spared(server, engine):
    """Two completions with `echo` sent one after the other, sharing a 100-token start: the second resumes at the
    first's last block boundary inside it and says so in `usage.prompt_tokens_details.cached_tokens` (vLLM's field);
    both echo the logprobs of a plain forward."""
    import torch

    rng = random.Random(12)
    context = [rng.randrange(200, 5000) for _ in range(100)]
    body = {"model": "demo", "echo": True, "logprobs": 1, "max_tokens": 0, "temperature": 0}
    prompts = [context + [11, 12, 13], context + [14, 15]]
    with httpx.Client(base_url=server, timeout=120) as client:
        answers = [client.post("/v1/completions", json={**body, "prompt": ids}).json() for ids in prompts]
    assert [a["usage"]["prompt_tokens_details"]["cached_tokens"] for a in answers] == [0, 96]
    for ids, answer in zip(prompts, answers):
        with torch.inference_mode():
            rows = torch.log_softmax(engine.executor.model(input_ids=torch.tensor([ids])).logits[0].float(), -1)
        echoed = answer["choices"][0]["logprobs"]["token_logprobs"]
        assert echoed[0] is None and len(echoed) == len(ids)
        assert max(abs(lp - rows[i, t].item()) for i, (lp, t) in enumerate(zip(echoed[1:], ids[1:]))) < 1e-5
