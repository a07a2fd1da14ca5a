"""The admission gate under real asyncio (and thread) concurrency: places, waits, refusals, fairness."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from blink.errors import Overloaded
from blink.web.admission import ANONYMOUS, KEYED, Admission, Bound, Policy


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
