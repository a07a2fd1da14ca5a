"""The admission gate under real asyncio (and thread) concurrency: places, waits, refusals, fairness."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from blink.errors import Overloaded
from blink.web.admission import ANONYMOUS, KEYED, Admission, Policy
from blink.web.bound import Bound


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_capacity_refuses_at_once_with_retry_after():
    admission = Admission({"decide": Policy(capacity=3)})

    async def main():
        release = asyncio.Event()
        inside = []

        async def one(i):
            async with admission.enter("decide"):
                inside.append(i)
                await release.wait()

        holders = [asyncio.create_task(one(i)) for i in range(3)]
        while len(inside) < 3:
            await asyncio.sleep(0.001)
        t = time.perf_counter()
        with pytest.raises(Overloaded) as refused:
            async with admission.enter("decide"):
                pass
        cost = time.perf_counter() - t
        release.set()
        await asyncio.gather(*holders)
        return refused.value, cost

    error, cost = run(main())
    assert error.status == 529 and int(error.headers["Retry-After"]) >= 1
    assert cost < 0.05  # a refusal costs no wait
    state = admission.state()["decide"]
    assert state["held"] == {KEYED: 0, ANONYMOUS: 0} and state["refused"] == 1 and state["admitted"] == 3


def test_bounded_wait_gets_the_next_free_place_in_order():
    admission = Admission({"chat": Policy(capacity=2, wait_s=5)})
    order = []

    async def main():
        async def chat(i, hold):
            async with admission.enter("chat"):
                order.append(i)
                await asyncio.sleep(hold)

        tasks = [asyncio.create_task(chat(0, 0.2)), asyncio.create_task(chat(1, 0.2))]
        await asyncio.sleep(0.02)
        tasks += [asyncio.create_task(chat(i, 0.01)) for i in (2, 3, 4)]
        await asyncio.sleep(0.02)
        assert admission.state()["chat"]["waiting"][KEYED] == 3
        await asyncio.gather(*tasks)

    run(main())
    assert order == [0, 1, 2, 3, 4]
    assert admission.state()["chat"]["waited"] == 3


def test_wait_past_the_limit_is_refused_and_leaves_no_trace():
    admission = Admission({"chat": Policy(capacity=1, wait_s=0.1)})

    async def main():
        release = asyncio.Event()

        async def hold():
            async with admission.enter("chat"):
                await release.wait()

        holder = asyncio.create_task(hold())
        await asyncio.sleep(0.01)
        t = time.perf_counter()
        with pytest.raises(Overloaded):
            async with admission.enter("chat"):
                pass
        waited = time.perf_counter() - t
        release.set()
        await holder
        return waited

    waited = run(main())
    assert 0.09 < waited < 1.0
    state = admission.state()["chat"]
    assert state["waiting"] == {KEYED: 0, ANONYMOUS: 0} and state["held"] == {KEYED: 0, ANONYMOUS: 0}


def test_a_cancelled_waiter_gives_its_place_back():
    admission = Admission({"chat": Policy(capacity=1, wait_s=10)})

    async def main():
        release = asyncio.Event()

        async def hold():
            async with admission.enter("chat"):
                await release.wait()

        async def wait_then_run():
            async with admission.enter("chat"):
                return "ran"

        holder = asyncio.create_task(hold())
        await asyncio.sleep(0.01)
        gone = asyncio.create_task(wait_then_run())  # the client that leaves while waiting
        await asyncio.sleep(0.01)
        gone.cancel()
        await asyncio.sleep(0.01)
        release.set()
        await holder
        assert await wait_then_run() == "ran"  # the place is free, not leaked to the cancelled waiter

    run(main())
    assert admission.state()["chat"]["held"] == {KEYED: 0, ANONYMOUS: 0}


def test_anonymous_traffic_never_takes_the_reserved_places():
    admission = Admission({"decide": Policy(capacity=4, reserved=2)})

    async def main():
        release = asyncio.Event()
        entered = []

        async def caller(cls):
            async with admission.enter("decide", cls):
                entered.append(cls)
                await release.wait()

        anon = [asyncio.create_task(caller(ANONYMOUS)) for _ in range(2)]
        await asyncio.sleep(0.01)
        with pytest.raises(Overloaded):  # a third anonymous caller: only reserved places are left
            async with admission.enter("decide", ANONYMOUS):
                pass
        keyed = [asyncio.create_task(caller(KEYED)) for _ in range(2)]
        await asyncio.sleep(0.01)
        assert sorted(entered) == [ANONYMOUS, ANONYMOUS, KEYED, KEYED]
        release.set()
        await asyncio.gather(*anon, *keyed)

    run(main())


def test_keyed_waiters_are_served_before_anonymous_ones():
    admission = Admission({"chat": Policy(capacity=1, wait_s=5)})
    order = []

    async def main():
        async def caller(name, cls, hold=0.0):
            async with admission.enter("chat", cls):
                order.append(name)
                await asyncio.sleep(hold)

        first = asyncio.create_task(caller("first", KEYED, 0.1))
        await asyncio.sleep(0.01)
        tasks = [asyncio.create_task(caller(f"anon{i}", ANONYMOUS)) for i in range(3)]
        await asyncio.sleep(0.01)
        tasks.append(asyncio.create_task(caller("keyed", KEYED)))  # arrives last, served first
        await asyncio.gather(first, *tasks)

    run(main())
    assert order == ["first", "keyed", "anon0", "anon1", "anon2"]


def test_threads_and_the_event_loop_share_the_places():
    """The UI's synchronous handlers (threads) and the API routes (the loop) hold places from one budget."""
    admission = Admission({"chat": Policy(capacity=2, wait_s=5)})
    peak = [0]
    lock = threading.Lock()
    inside = [0]

    def count(delta):
        with lock:
            inside[0] += delta
            peak[0] = max(peak[0], inside[0])

    def ui_chat():
        with admission.enter_sync("chat", ANONYMOUS):
            count(+1)
            time.sleep(0.05)
            count(-1)

    async def main():
        async def api_chat():
            async with admission.enter("chat", KEYED):
                count(+1)
                await asyncio.sleep(0.05)
                count(-1)

        threads = [threading.Thread(target=ui_chat) for _ in range(4)]
        for t in threads:
            t.start()
        await asyncio.gather(*(api_chat() for _ in range(4)))
        await asyncio.to_thread(lambda: [t.join() for t in threads])

    run(main())
    assert peak[0] == 2
    assert admission.state()["chat"]["admitted"] == 8


def test_preparing_is_bounded_inside_the_admitted():
    admission = Admission({"decide": Policy(capacity=16, preparing=2)})
    peak, inside = [0], [0]

    async def main():
        async def request():
            async with admission.enter("decide") as ticket:
                async with ticket.preparing():
                    inside[0] += 1
                    peak[0] = max(peak[0], inside[0])
                    await asyncio.sleep(0.01)
                    inside[0] -= 1

        await asyncio.gather(*(request() for _ in range(10)))

    run(main())
    assert peak[0] == 2


def test_bound_hands_over_across_threads():
    bound = Bound(1)
    seen = []

    def worker(i):
        with bound.hold_sync():
            seen.append(("in", i))
            time.sleep(0.01)
            seen.append(("out", i))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # strictly one at a time: every "in" is followed by its own "out"
    assert all(seen[k][0] == "in" and seen[k + 1] == ("out", seen[k][1]) for k in range(0, len(seen), 2))
    assert bound.held == 0


def test_retry_after_grows_with_the_line_ahead():
    admission = Admission({"chat": Policy(capacity=1, wait_s=5)})
    gate = admission.gate("chat")
    gate.mean_hold_s = 4.0

    async def main():
        release = asyncio.Event()

        async def hold():
            async with admission.enter("chat"):
                await release.wait()

        tasks = [asyncio.create_task(hold()) for _ in range(3)]  # one holds, two wait
        await asyncio.sleep(0.01)
        after = gate.retry_after()
        release.set()
        await asyncio.gather(*tasks)
        return after

    assert run(main()) == 12  # two ahead plus itself, 4 s each, one at a time


def test_standard_policies_and_bad_policy():
    admission = Admission.standard(max_queued=8, max_batch=4, max_chats=4, chat_wait_s=30)
    state = admission.state()
    assert state["decide"]["capacity"] == 12 and state["chat"]["capacity"] == 4 and state["chat"]["wait_s"] == 30
    with pytest.raises(ValueError):
        Policy(capacity=2, reserved=2)
    with pytest.raises(ValueError):
        admission.gate("nope")


# requests of several decisions: one place per decision -------------------------------------------------------
def test_a_request_of_many_decisions_holds_a_place_for_each_and_gives_them_all_back():
    admission = Admission({"decide": Policy(capacity=40, wait_s=5)})
    gate = admission.gate("decide")

    async def main():
        async with admission.admit("decide", KEYED, lambda: ["doc"] * 32, units=len) as (checked, _):
            assert len(checked) == 32 and gate.held[KEYED] == 32
            # 8 places are left: a request of 9 waits, one of 8 gets in at once
            async with admission.enter("decide", units=8):
                assert gate.held[KEYED] == 40
            waiting = asyncio.create_task(_enter_and_hold(admission, 9))
            await asyncio.sleep(0.02)
            assert gate.state()["waiting"][KEYED] == 1 and not waiting.done()
        assert await waiting == 9  # the 32 places freed together: the waiter of 9 got its places
        assert gate.held[KEYED] == 0

    run(main())
    assert admission.state()["decide"]["admitted"] == 3


async def _enter_and_hold(admission, units):
    async with admission.enter("decide", units=units):
        return admission.gate("decide").held[KEYED]


def test_a_request_larger_than_the_gate_is_refused_at_once_naming_the_limit():
    from blink.errors import InvalidRequest

    admission = Admission({"decide": Policy(capacity=16, wait_s=30, reserved=4)})

    async def main():
        t = time.perf_counter()
        with pytest.raises(InvalidRequest) as refused:
            async with admission.admit("decide", KEYED, lambda: list(range(17)), units=len):
                pass
        assert time.perf_counter() - t < 0.05  # refused, never left waiting for places that cannot all free
        return refused.value

    error = run(main())
    assert error.status == 422 and "17" in error.message and "at most 16" in error.message
    with pytest.raises(InvalidRequest, match="at most 12"):  # anonymous callers never take the reserved places
        with admission.enter_sync("decide", ANONYMOUS, units=13):
            pass
    with admission.enter_sync("decide", KEYED, units=16):  # exactly the capacity fits
        pass
    state = admission.state()["decide"]
    assert state["held"] == {KEYED: 0, ANONYMOUS: 0} and state["admitted"] == 1 and state["refused"] == 0
    with pytest.raises(ValueError):
        run(_enter_with(admission, lambda: [], len))  # a request holds at least one place


async def _enter_with(admission, check, units):
    async with admission.admit("decide", KEYED, check, units=units):
        pass


def test_cancelling_a_request_of_many_decisions_frees_all_its_places_waiting_or_holding():
    admission = Admission({"decide": Policy(capacity=10, wait_s=10)})
    gate = admission.gate("decide")

    async def main():
        release = asyncio.Event()

        async def hold(units):
            async with admission.enter("decide", units=units):
                await release.wait()

        holder = asyncio.create_task(hold(6))
        await asyncio.sleep(0.01)
        waiter = asyncio.create_task(hold(5))  # 4 places free: it waits, and blocks a request of 3 behind it
        await asyncio.sleep(0.01)
        behind = asyncio.create_task(_enter_and_hold(admission, 3))
        await asyncio.sleep(0.01)
        assert gate.state()["waiting"][KEYED] == 2 and gate.held[KEYED] == 6
        waiter.cancel()  # the client of 5 leaves: the one of 3 behind it fits and goes in
        assert await behind == 9
        holder.cancel()  # a holder cancelled mid-work gives back all 6 places
        await asyncio.gather(holder, return_exceptions=True)
        assert gate.held[KEYED] == 0 and not gate.state()["waiting"][KEYED]
        release.set()

    run(main())
    assert admission.state()["decide"]["held"] == {KEYED: 0, ANONYMOUS: 0}


def test_the_batcher_scores_a_requests_decisions_in_one_call_even_without_a_window():
    """A window of 0 serves one request per call; a request of 32 decisions is one request: one call, not 32."""
    from blink.decide.batching import Batcher

    calls = []

    def score(plans, caller):
        calls.append(list(plans))
        return [f"scored {plan}" for plan in plans]

    batcher = Batcher(score, window_s=0.0)
    way = batcher.on_its_way()
    jobs = batcher.submit_many([(f"doc{i}", [f"prior{i}"] if i == 0 else []) for i in range(32)], "A", way)
    assert batcher.incoming == 0  # its count on its way ended as it was queued
    assert [job.future.result(timeout=10) for job in jobs] == [f"scored doc{i}" for i in range(32)]
    assert jobs[0].extra_scored == ["scored prior0"] and len(calls) == 1 and len(calls[0]) == 33
    assert batcher.batches == 1 and batcher.requests == 1
    # a request whose client left before its pass is dropped whole, uncomputed
    blocker = threading.Event()
    slow = Batcher(lambda plans, caller: (blocker.wait(10), [plan for plan in plans])[1], window_s=0.0)
    first = slow.submit("first")
    gone = slow.submit_many([("a", []), ("b", [])])
    for job in gone:
        job.future.cancel()
    blocker.set()
    assert first.future.result(timeout=10) == "first"
    kept = slow.submit("kept")
    assert kept.future.result(timeout=10) == "kept" and slow.stats()["dropped_client_gone"] == 1


def test_a_services_many_decisions_answer_as_each_alone(engine):
    """`run_many`: each document its own state, answered exactly as that decision alone; one place per decision."""
    from blink.backend import LocalBackend
    from blink.decide.service import DecisionService

    service = DecisionService(engine, LocalBackend(engine, None))
    admission = Admission.standard()
    question = {"relevant": {"type": "noul", "instructions": "Does this text say how to reset a password?"}}
    docs = ["Hold the power button for ten seconds.", "Click 'Forgot password' on the sign-in page.", "Tea."]
    bodies = [{"state": doc, "questions": question, "x_calibration": "prior"} for doc in docs]

    async def decide():
        way = service.on_its_way()
        async with admission.admit("decide", KEYED, service.check_many, bodies, way, units=len) as admitted:
            checked, ticket = admitted
            assert admission.gate("decide").held[KEYED] == 3
            decided = await service.run_many(checked, ticket)
        assert service.batcher.incoming == 0
        return decided

    decided = asyncio.run(decide())
    for body, one in zip(bodies, decided, strict=True):
        alone = engine.decide(body)
        assert abs(one.answers["relevant"]["noul"] - alone["relevant"]["noul"]) <= 1e-6
        assert one.calibration["prior"]["answers"]["relevant"] is not None
    assert service.batcher.requests == 1 and admission.state()["decide"]["held"][KEYED] == 0
