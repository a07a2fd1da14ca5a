"""The batcher's bulk lane (blink.decide.batching, blink.decide.bulk_pace): bulk rows (the Batch API's) are never in
a model call with an interactive request, an interactive request waiting goes before every queued bulk row (it
waits at most for the bulk call already running), and a bulk call holds as many rows as its seconds allow at the
speed bulk calls ran at. The batcher runs on its own thread with a score function that records each call and can
be held mid-call; the Batch API's end-to-end side is in test_batch_api.py. On the demo engine: a bulk row reads saved
states and saves one only where bulk rows repeat it."""

from __future__ import annotations

import threading

import pytest

from blink.decide.batching import Batcher
from blink.decide.bulk_pace import BulkPace, plan_tokens
from blink.plan import Prompt
from blink.web.callers import Caller, with_lane

BULK = Caller("ip:batch-api", bulk=True)
PEOPLE = [Caller("ip:127.0.0.2"), Caller("ip:127.0.0.3")]


class HeldScore:
    """A score function that records each call's plans and holds the call while `hold` is clear."""

    def __init__(self):
        self.calls: list[list] = []
        self.hold = threading.Event()
        self.hold.set()
        self.started = threading.Event()

    def __call__(self, plans, caller):
        self.calls.append(list(plans))
        self.started.set()
        assert self.hold.wait(10)
        return [f"scored {plan}" for plan in plans]


def prompts(n_tokens: int) -> list[Prompt]:
    return [Prompt(ids=list(range(n_tokens)), reads=[])]


def lane_of(plan) -> str:
    text = plan if isinstance(plan, str) else "bulk"
    return "bulk" if text.startswith("bulk") else "interactive"


def test_an_interactive_request_goes_before_queued_bulk_rows_and_never_shares_their_call():
    score = HeldScore()
    batcher = Batcher(score, window_s=0.05, max_batch=16, max_queued=256, bulk_call_s=60.0)
    score.hold.clear()
    first = batcher.submit("bulk-0", BULK)
    assert score.started.wait(10)  # the first bulk call runs (one row: no speed known yet) and is held
    queued = [batcher.submit(f"bulk-{i}", BULK) for i in range(1, 9)]
    people = [batcher.submit(f"person-{i}", PEOPLE[i % 2]) for i in range(3)]
    score.hold.set()
    for job in [first, *queued, *people]:
        assert job.future.result(timeout=10) == f"scored {job.plan}"
    lanes = [{lane_of(plan) for plan in call} for call in score.calls]
    assert all(len(lane) == 1 for lane in lanes), score.calls  # never a call with both
    assert score.calls[0] == ["bulk-0"]
    # the people waited for the running bulk call only: the next calls are theirs (one quota on serve: one call)
    assert lanes[1] == {"interactive"} and sorted(score.calls[1]) == ["person-0", "person-1", "person-2"]
    # the queued bulk rows then go together, whatever the window: the pace allows 60 s
    assert all(lane == {"bulk"} for lane in lanes[2:]) and len(score.calls) == 3
    stats = batcher.stats()["bulk"]
    assert stats["calls"] == 2 and stats["rows"] == 9 and batcher.requests == 12


def test_a_bulk_call_holds_what_fits_in_its_seconds():
    score = HeldScore()
    batcher = Batcher(score, window_s=0.0, max_queued=256, bulk_call_s=0.5)
    batcher.bulk.s_per_token = 0.001  # as if measured: 500 tokens fit in a call
    score.hold.clear()
    blocker = batcher.submit("person-0", PEOPLE[0])  # holds the thread while the rows queue
    assert score.started.wait(10)
    rows = [batcher.submit(prompts(120), BULK) for _ in range(10)]
    score.hold.set()
    for job in [blocker, *rows]:
        job.future.result(timeout=10)
    sizes = [len(call) for call in score.calls[1:]]
    assert sum(sizes) == 10 and sizes[0] == 4  # 4 x 120 tokens fit in 500; a fifth would not
    # the measured speed (here: microseconds a call) sizes the calls after it
    assert batcher.bulk.calls == len(sizes) and batcher.bulk.s_per_token < 0.001


def test_the_pace_starts_with_one_row_and_follows_the_calls():
    pace = BulkPace(call_s=2.0)
    assert pace.budget() == 0.0  # the first call: its first row only
    pace.record(rows=1, tokens=100, seconds=0.5)
    assert pace.budget() == pytest.approx(400.0)
    pace.record(rows=4, tokens=400, seconds=0.4)  # faster per token than the first: the budget grows
    assert pace.budget() > 400.0 and pace.stats()["longest_call_s"] == 0.5
    assert plan_tokens(prompts(37)) == 37 and plan_tokens("a stand-in") == 1


def test_only_an_in_process_caller_is_bulk():
    """The mark is an ASGI scope key, which no HTTP client can set: a header or a body field never makes one."""

    class Request:
        def __init__(self, scope):
            self.scope = scope

    person = Caller("ip:127.0.0.2")
    assert with_lane(person, Request({"blink.bulk": True})).bulk
    assert not with_lane(person, Request({"headers": [(b"blink.bulk", b"1")]})).bulk
    assert with_lane(person, None) is person


def test_bulk_rows_read_saved_states_and_save_no_new_one(engine):
    """On the local backend a bulk row about a new state saves nothing in the prefix-state cache (a batch never
    pushes interactive callers' states out) but reads one saved there; its answer is the same either way."""
    from blink.backend import LocalBackend

    backend, cache = LocalBackend(engine, None), engine.executor.prefix_cache
    assert cache.active
    state = "A ticket no test has sent before: the parcel came late, the box was torn and the invoice is wrong. " * 4
    plan = engine.prepare({"state": state, "questions": {"q": {"type": "noul", "instructions": "Urgent?"}}}).prompts
    held = {k: cache.stats()[k] for k in ("entries", "used_mib")}
    (bulk,) = backend.score([plan], BULK)
    assert {k: cache.stats()[k] for k in held} == held and bulk.cached_tokens == 0  # nothing saved, nothing evicted
    (person,) = backend.score([plan], PEOPLE[0])  # an interactive caller's state is saved (evicting others if full)
    (again,) = backend.score([plan], BULK)
    assert again.cached_tokens > 0  # and a bulk row about it resumes there
    for one in (person, again):
        for a, b in zip(flat(bulk.result()), flat(one.result())):
            assert abs(a - b) <= 1e-5


def test_a_state_bulk_rows_repeat_is_saved_once_it_repeats(engine):
    """A table whose rows share a state runs it once: the first bulk row about it saves nothing (a table of new
    states leaves the cache as it was), the second saves it, the third resumes there; the answers are the same."""
    from blink.backend import LocalBackend

    backend, cache = LocalBackend(engine, None), engine.executor.prefix_cache
    state = "A state bulk rows repeat: the same ticket asked about by every line of a table, word for word. " * 4
    plan = engine.prepare({"state": state, "questions": {"q": {"type": "noul", "instructions": "Urgent?"}}}).prompts
    held = {k: cache.stats()[k] for k in ("entries", "used_mib")}
    (first,) = backend.score([plan], BULK)
    assert {k: cache.stats()[k] for k in held} == held and first.cached_tokens == 0
    (second,) = backend.score([plan], BULK)
    assert second.cached_tokens < len(plan[0].ids) // 2  # computed afresh, and saved (evicting others if full:
    (third,) = backend.score([plan], BULK)  # the cache's size may even fall, so the third row is the proof)
    assert third.cached_tokens >= plan[0].state_end  # resumed at the state's end
    for one in (second, third):
        for a, b in zip(flat(first.result()), flat(one.result())):
            assert abs(a - b) <= 1e-5


def flat(value) -> list[float]:
    if isinstance(value, list | tuple):
        return [x for v in value for x in flat(v)]
    return [float(value)]
