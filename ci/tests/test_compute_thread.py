"""On the CPU every forward pass runs on one thread, whoever asks (blink/executor/compute_thread.py): a second
thread running the model makes a second OpenMP pool, and libgomp then throttles its workers (bench/latency/pools.py)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from blink.executor.compute_thread import COMPUTE
from blink.executor.decoder import decoder_of
from blink.plan import GenerationParams
from helpers import assert_close

REQUEST = {
    "state": "The parcel arrived broken and I want my money back.",
    "questions": {
        "refund": {"type": "noul", "instructions": "Is the customer asking for money back?"},
        "team": {"type": "choice", "instructions": "Which team?", "criteria": {"billing": None, "shipping": None}},
    },
}


@pytest.fixture
def pass_threads(engine):
    """The threads the decoder's first layer ran on while the test ran."""
    seen: set[int] = set()
    decoder, _ = decoder_of(engine.loaded.model)
    handle = decoder.layers[0].register_forward_pre_hook(lambda *_: seen.add(threading.get_ident()))
    yield seen
    handle.remove()


def test_decisions_from_any_thread_run_on_the_compute_thread(engine, pass_threads):
    here = engine.decide(REQUEST)
    with ThreadPoolExecutor(2) as pool:
        there = [f.result() for f in [pool.submit(engine.decide, REQUEST) for _ in range(3)]]
    assert there == [here] * 3
    assert pass_threads == {COMPUTE._ident}
    assert threading.get_ident() not in pass_threads


def test_a_chat_generator_pulled_from_many_threads_runs_on_the_compute_thread(engine, pass_threads):
    from blink.generate.chat_engine import ChatEngine

    chat = ChatEngine(engine.loaded)
    ids = chat.render([{"role": "user", "content": "Say something."}]).ids
    alone = list(chat.generate(ids, GenerationParams(max_tokens=8, temperature=0)))
    items = chat.generate(ids, GenerationParams(max_tokens=8, temperature=0))
    with ThreadPoolExecutor(3) as pool:  # each step pulled by whichever worker, as anyio and Gradio do
        pulled = []
        while (item := pool.submit(next, items, None).result()) is not None:
            pulled.append(item)
    assert pulled[:-1] == alone[:-1]  # the same text (the last item is the end, with its timing)
    assert pulled[-1].completion_tokens == alone[-1].completion_tokens == 8
    assert pass_threads == {COMPUTE._ident}


def test_a_generator_closed_early_leaves_the_thread_free(engine, pass_threads):
    from blink.generate.chat_engine import ChatEngine

    chat = ChatEngine(engine.loaded)
    ids = chat.render([{"role": "user", "content": "Count to a hundred."}]).ids
    items = chat.generate(ids, GenerationParams(max_tokens=64, temperature=0))
    next(items)
    items.close()  # a client that left mid-stream
    assert engine.decide(REQUEST) == engine.decide(REQUEST)
    assert pass_threads == {COMPUTE._ident}


def test_an_error_on_the_compute_thread_reaches_the_caller_as_it_is():
    def fails():
        raise ValueError("bad input")

    with pytest.raises(ValueError, match="bad input"):
        COMPUTE.call(fails)
    assert COMPUTE.call(lambda: threading.get_ident()) == COMPUTE._ident


def test_the_service_batches_on_the_compute_thread_itself(engine, pass_threads):
    """On the CPU the decision batcher has no thread of its own: its batches run on the compute thread, so a
    decision crosses one thread there and one back (bench/RESULTS.md, seventh session)."""
    import asyncio

    from blink.backend import LocalBackend
    from blink.decide.service import DecisionService
    from blink.web.admission import KEYED, Admission

    service = DecisionService(engine, LocalBackend(engine, None))
    admission = Admission.standard()

    async def decide():
        async with admission.admit("decide", KEYED, service.check, REQUEST) as (checked, ticket):
            return await service.run(checked, ticket)

    assert service.batcher.thread is None and service.batcher.on is COMPUTE
    assert_close(asyncio.run(decide()).answers, engine.decide(REQUEST))  # two forwards: within blink's 1e-6
    assert service.batcher.stats()["worker_alive"] and service.batcher.requests == 1
    assert pass_threads == {COMPUTE._ident}


def scored_on(thread_ids: list):
    def score(plans, caller):
        thread_ids.append(threading.get_ident())
        return [(caller, plan) for plan in plans]

    return score


def test_batches_take_turns_with_what_else_waits_on_the_compute_thread():
    """One turn is posted at a time: a chat step posted after three queued requests runs after the first batch,
    not after all three; callers keep their arrival order."""
    from blink.decide.batching import Batcher
    from blink.executor.compute_thread import ComputeThread

    on, ran, gate, order = ComputeThread("test-compute"), [], threading.Event(), []
    score = scored_on(ran)
    batcher = Batcher(lambda plans, caller: (order.extend(plans), score(plans, caller))[1], on=on)
    on.post(lambda: gate.wait(10))  # the thread busy (a pass) while the requests arrive
    jobs = [batcher.submit(i, caller) for i, caller in enumerate(["A", "B", "A"])]
    on.post(lambda: order.append("chat step"))
    gate.set()
    assert [job.future.result(timeout=10) for job in jobs] == [("A", 0), ("B", 1), ("A", 2)]
    assert order == [0, "chat step", 1, 2]
    assert set(ran) == {on.call(threading.get_ident)} and batcher.thread is None


def test_a_window_on_the_compute_thread_batches_one_callers_waiting_requests():
    from blink.decide.batching import Batcher
    from blink.executor.compute_thread import ComputeThread

    on, ran, gate = ComputeThread("test-compute"), [], threading.Event()
    batcher = Batcher(scored_on(ran), window_s=0.05, max_batch=16, on=on)
    on.post(lambda: gate.wait(10))
    jobs = [batcher.submit(i, caller) for i, caller in enumerate(["A", "A", "B", "A"])]
    gate.set()
    assert [job.future.result(timeout=10) for job in jobs] == [("A", 0), ("A", 1), ("B", 2), ("A", 3)]
    assert batcher.batches == 2 and batcher.requests == 4  # A's three together, then B's


def test_a_request_whose_client_left_before_its_turn_is_never_scored():
    from blink.decide.batching import Batcher
    from blink.executor.compute_thread import ComputeThread

    on, ran, gate = ComputeThread("test-compute"), [], threading.Event()
    batcher = Batcher(scored_on(ran), on=on)
    on.post(lambda: gate.wait(10))
    gone, kept = batcher.submit("gone"), batcher.submit("kept")
    assert gone.future.cancel()
    gate.set()
    assert kept.future.result(timeout=10) == (None, "kept")
    assert len(ran) == 1 and batcher.stats()["dropped_client_gone"] == 1 and batcher.stats()["queued"] == 0


def test_a_request_stops_being_expected_as_it_is_queued_or_refused():
    """A window waits only for requests still on their way: one already queued (or refused) is not counted."""
    from blink.decide.batching import Batcher
    from blink.errors import Overloaded
    from blink.executor.compute_thread import ComputeThread

    on, gate = ComputeThread("test-compute"), threading.Event()
    batcher = Batcher(scored_on([]), window_s=0.05, max_queued=1, on=on)
    on.post(lambda: gate.wait(10))
    way = batcher.on_its_way()
    assert batcher.incoming == 1
    queued = batcher.submit("a", on_its_way=way)
    assert batcher.incoming == 0
    way.release()  # let go again as its exchange ends: already counted out
    assert batcher.incoming == 0
    with pytest.raises(Overloaded):
        batcher.submit("b", on_its_way=batcher.on_its_way())
    assert batcher.incoming == 0
    gate.set()
    assert queued.future.result(timeout=10) == (None, "a")
