"""The prefix-state cache: answers with and without the cache are identical (fp32, <= 1e-6), alone, in batches and
under concurrent requests to a real server; usage reports the tokens the cache spared; a system prompt seen before
and an image's prefix are save points; entries cost what they count and stay in the budget; prompt logprobs
(lm-eval's choices, `echo`) resume from saved blocks exactly. Those last share `engines` (through `scoring`), so
they stay in this module: a second engine with the cache off is an Engine built again (seconds). Rendering once
and the question memo: test_rendering_once.py."""

from __future__ import annotations

import random
import tracemalloc
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from blink.plan import Prompt
from helpers import assert_close, check_resumes_share_and_keep_saved_states, random_request, worst


@pytest.fixture(scope="module")
def engines(engine):
    """The session's engine with a fresh cache, and one over the same model with the cache off."""
    from blink.decide.planner import Engine
    from blink.executor.prefix_cache import PrefixCache

    engine.executor.prefix_cache = PrefixCache(64 << 20)
    return engine, Engine(engine.loaded, prefix_cache_bytes=0)


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
    assert_close(answers[:3], answers[3:])  # a repeat from the cache: within blink's 1e-6 (no bit-identity promised)
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
