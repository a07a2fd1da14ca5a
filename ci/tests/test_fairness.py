"""Fair admission per caller: the fair queue's properties, the gate sharing its places between the callers waiting,
who a caller is (the peer; `X-Forwarded-For` only from a trusted proxy; `X-IP-Token` never on `serve`), and a real
server on loopback serving a polite caller (127.0.0.3) ahead of a greedy one's backlog (127.0.0.2)."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blink.errors import InvalidRequest, Overloaded
from blink.web.admission import ANONYMOUS, KEYED, Gate, Policy
from blink.web.callers import Caller, Peers, key_of, quota_of
from blink.web.fair_queue import FairQueue
from helpers import blink_serve, running

CALLERS = st.sampled_from("abcde")


# --- the fair queue, by property ----------------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(backlog=st.lists(st.tuples(CALLERS, st.integers(1, 8)), max_size=60), units=st.integers(1, 8))
def test_a_newcomer_is_served_after_at_most_one_entry_of_each_other_caller(backlog, units):
    """No caller starves behind another's backlog: a caller with nothing waiting is served within one round."""
    queue = FairQueue()
    for key, n in backlog:
        queue.push(key, n, (key, n))
    if backlog:  # some of the backlog already served: virtual time has moved
        queue.pop(queue.head())
    queue.push("new", units, "new")
    before = []
    while (item := queue.pop(queue.head())) != "new":
        before.append(item[0])
    assert all(before.count(key) <= 1 for key in set(before))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(CALLERS, st.integers(1, 8)), min_size=1, max_size=80))
def test_backlogged_callers_are_served_equal_work(pushes):
    """While two callers both have work waiting, the units served to each differ by at most one entry's units."""
    queue = FairQueue()
    for key, n in pushes:
        queue.push(key, n, (key, n))
    served: dict[str, int] = {}
    while queue:
        key, n = queue.pop(queue.head())
        served[key] = served.get(key, 0) + n
        backlogged = [k for k in queue.queues]
        for a in backlogged:
            for b in backlogged:
                assert served.get(a, 0) - served.get(b, 0) <= 8


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(CALLERS, st.integers(1, 5)), max_size=40), st.data())
def test_removing_entries_keeps_the_counts_and_forgets_idle_callers(pushes, data):
    queue = FairQueue()
    entries = [queue.push(key, n, i) for i, (key, n) in enumerate(pushes)]
    gone = data.draw(st.lists(st.sampled_from(entries), unique_by=lambda e: e.seq) if entries else st.just([]))
    for entry in gone:
        queue.remove(entry)
    left = [e for e in entries if e not in gone]
    assert len(queue) == len(left) and queue.units == sum(e.units for e in left)
    assert all(queue.waiting(k) == sum(e.units for e in left if e.key == k) for k in "abcde")
    while queue:
        queue.pop(queue.head())
    assert not queue.queues and not queue.units_by


# --- the gate, by property: places, fairness, the cap ------------------------------------------------------
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("arrive"), CALLERS, st.integers(1, 4), st.sampled_from((KEYED, ANONYMOUS))),
        st.tuples(st.just("leave"), st.integers(0, 1000)),
    ),
    max_size=80,
)


@settings(max_examples=150, deadline=None)
@given(OPS, st.integers(4, 12), st.integers(0, 6), st.integers(0, 3))
def test_the_gate_is_work_conserving_capped_and_starves_nobody(ops, capacity, per_caller, kept):
    """After every step: no place is held past the capacity, no caller holds more than its cap, and a place
    stays free only when the next waiter in fair order needs more than are free, or is a caller already holding
    places that would take those kept for others. At the end, as the holders leave, every waiter is served."""
    gate = Gate("decide", Policy(capacity, wait_s=60, reserved=1, per_caller=per_caller, kept_for_others=kept))
    holding, waiting = [], []
    for op in ops:
        if op[0] == "arrive":
            _, who, units, caller_class = op
            try:
                waiter = gate._enqueue(caller_class, who, units, lambda: None)
            except Overloaded:  # past its cap (checked below: only then)
                assert per_caller and gate._mine(who) + units > per_caller
                continue
            except InvalidRequest:  # more than such a request may ever hold: refused as too much work
                assert units > gate.most(caller_class)
                continue
            (waiting if waiter is not None else holding).append((caller_class, who, units, waiter))
        elif holding:
            caller_class, who, units, _ = holding.pop(op[1] % len(holding))
            gate._release(caller_class, who, units)
        holding += [w for w in waiting if w[3].granted]
        waiting = [w for w in waiting if not w[3].granted]
        check_gate(gate, capacity, per_caller)
    while holding:
        caller_class, who, units, _ = holding.pop(0)
        gate._release(caller_class, who, units)
        holding += [w for w in waiting if w[3].granted]
        waiting = [w for w in waiting if not w[3].granted]
    assert not waiting and not gate.held_by and gate.held == {KEYED: 0, ANONYMOUS: 0}


def check_gate(gate: Gate, capacity: int, per_caller: int) -> None:
    held = gate.held[KEYED] + gate.held[ANONYMOUS]
    assert held <= capacity and gate.held[ANONYMOUS] <= capacity - 1
    assert sum(gate.held_by.values()) == held
    if per_caller:
        assert all(gate._mine(who) <= per_caller for who in gate.held_by)
    for caller_class in (KEYED, ANONYMOUS):
        queue = gate.waiting[caller_class]
        head = queue.head(gate._leaves_room)
        if head is not None:  # work conserving: it waits only because it does not fit
            assert not gate._fits(caller_class, head.units)
        for entry in queue.entries():  # the others wait only for places kept from a caller already holding some
            if entry is not head and queue.queues[entry.key][0] is entry and not gate._leaves_room(entry.item):
                room = capacity - (1 if caller_class == ANONYMOUS else 0) - gate.policy.kept_for_others
                assert gate.held_by[entry.key] and gate.held_by[entry.key] + entry.units > room


def test_a_polite_caller_takes_the_next_free_place_ahead_of_a_greedy_backlog():
    gate = Gate("decide", Policy(4, wait_s=60))
    for _ in range(4):
        assert gate._enqueue(KEYED, "greedy", 1, lambda: None) is None
    greedy = [gate._enqueue(KEYED, "greedy", 1, lambda: None) for _ in range(20)]
    polite = gate._enqueue(KEYED, "polite", 1, lambda: None)
    gate._release(KEYED, "greedy", 1)  # the first place to free
    # the greedy waiters are tagged after the four places it holds; the polite one at the virtual time now
    assert polite.granted and not any(w.granted for w in greedy)
    assert gate.held_by == {"greedy": 3, "polite": 1}


def test_a_caller_holding_places_leaves_one_batch_free_for_the_next_caller():
    """The places kept for others: a greedy caller alone holds all but them and waits for more; a caller
    arriving takes one at once; a caller holding none takes a request bigger than the rest whole."""
    gate = Gate("decide", Policy(8, wait_s=60, kept_for_others=2))
    held = [gate._enqueue(KEYED, "greedy", 1, lambda: None) for _ in range(6)]
    assert held == [None] * 6  # granted at once
    greedy = [gate._enqueue(KEYED, "greedy", 1, lambda: None) for _ in range(10)]
    assert not any(w.granted for w in greedy) and gate.held[KEYED] == 6
    assert gate._enqueue(KEYED, "polite", 1, lambda: None) is None  # a free place, no wait
    gate._release(KEYED, "polite", 1)  # polite leaves: greedy still may not take the kept places
    assert not any(w.granted for w in greedy)
    gate._release(KEYED, "greedy", 1)
    assert [w.granted for w in greedy].count(True) == 1 and gate.held_by == {"greedy": 6}
    assert gate.state()["kept_for_others"] == 2
    alone = Gate("decide", Policy(8, wait_s=60, kept_for_others=2))
    assert alone._enqueue(KEYED, "big", 7, lambda: None) is None  # holding none: served whole, past the 6
    assert alone._enqueue(KEYED, "big", 1, lambda: None) is not None  # holding some: the last place is kept
    assert alone._enqueue(KEYED, "other", 1, lambda: None) is None


def test_past_its_cap_a_caller_is_refused_with_retry_after_and_others_are_not():
    gate = Gate("decide", Policy(8, wait_s=60, per_caller=3))
    for _ in range(3):
        gate._enqueue(KEYED, "greedy", 1, lambda: None)
    with pytest.raises(Overloaded) as refused:
        gate._enqueue(KEYED, "greedy", 1, lambda: None)
    assert refused.value.status == 529 and int(refused.value.headers["Retry-After"]) >= 1
    assert "its share of 3" in refused.value.message
    assert gate._enqueue(KEYED, "polite", 1, lambda: None) is None
    assert gate.state()["refused_at_caller_cap"] == 1


# --- who a caller is -----------------------------------------------------------------------------------------
def test_x_forwarded_for_is_read_only_from_a_trusted_proxy():
    open_, proxied = Peers(), Peers(["10.0.0.0/8", "::1"])
    assert open_.address("203.0.113.9", "198.51.100.1") == "203.0.113.9"  # not a proxy: its header is ignored
    assert proxied.address("203.0.113.9", "198.51.100.1") == "203.0.113.9"
    assert proxied.address("10.1.2.3", "198.51.100.1") == "198.51.100.1"
    # right to left through the trusted hops; what the client wrote to the left of its own address is not read
    assert proxied.address("10.1.2.3", "6.6.6.6, 198.51.100.1, 10.9.9.9") == "198.51.100.1"
    assert proxied.address("::1", "garbage") == "::1"  # a malformed hop: the proxy's own address, nothing made up
    assert Peers().address("10.1.2.3", "6.6.6.6, 198.51.100.1", behind_proxy=True) == "198.51.100.1"
    with pytest.raises(ValueError):
        Peers(["not-an-address"])


def test_a_caller_carries_its_key_and_its_quota():
    caller = Caller("zerogpu:abc", (("x-ip-token", "t"),))
    assert key_of(caller) == "zerogpu:abc" and quota_of(caller) == (("x-ip-token", "t"),)
    assert key_of(None) == "unknown" and quota_of(None) is None and quota_of((("x-ip-token", "t"),))


# --- a real server on loopback -------------------------------------------------------------------------------
QUESTION = {"type": "noul", "instructions": "Is this about the weather?"}


def body(who: str, n: int, words: int = 20) -> dict:
    return {"state": f"{who} {n}: " + "the forecast says rain by noon " * words, "questions": {"q": QUESTION}}


def client(url: str, address: str, n: int) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    transport = httpx.AsyncHTTPTransport(local_address=address, limits=limits)
    return httpx.AsyncClient(base_url=url, transport=transport, timeout=300)


async def greedy_then_polite(url: str, backlog: int) -> tuple[list[float], float, list[int]]:
    """The greedy caller sends `backlog` decisions at once; once they hold their places the polite caller sends
    one. The times each was answered (seconds from the start), and the statuses."""
    started = time.perf_counter()
    statuses = []
    async with client(url, "127.0.0.2", backlog) as greedy, client(url, "127.0.0.3", 1) as polite:

        async def one(http, who, n):
            r = await http.post("/v1/systemone", json=body(who, n))
            statuses.append(r.status_code)
            return time.perf_counter() - started

        greedy_tasks = [asyncio.create_task(one(greedy, "greedy", n)) for n in range(backlog)]
        async with httpx.AsyncClient(base_url=url) as watch:
            while (await watch.get("/healthz")).json()["admission"]["decide"]["held"][KEYED] < backlog // 2:
                await asyncio.sleep(0.01)
        polite_at = await one(polite, "polite", 0)
        return sorted(await asyncio.gather(*greedy_tasks)), polite_at, statuses


def test_the_polite_caller_is_served_ahead_of_the_greedy_backlog(demo_root):
    backlog = 64
    with running(blink_serve("--batch-window-ms", "10"), demo_root, name="serve-fair") as url:
        httpx.post(url + "/v1/systemone", json=body("warm", 0), timeout=120)
        greedy, polite_at, statuses = asyncio.run(greedy_then_polite(url, backlog))
    assert statuses.count(200) == backlog + 1, statuses
    ahead = sum(t < polite_at for t in greedy)
    # first come first served it would wait for most of the backlog; fairly it goes into one of the next batches
    assert ahead <= backlog // 2, f"{ahead} of the greedy caller's {backlog} decisions were answered before it"


async def burst(url: str, n: int, headers) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=url, timeout=300) as http:
        return await asyncio.gather(
            *(http.post("/v1/systemone", json=body("burst", i, words=200), headers=headers(i)) for i in range(n))
        )


def capped(responses: list[httpx.Response]) -> int:
    return sum(r.status_code == 529 and "its share" in r.text for r in responses)


@pytest.mark.parametrize("trusted", [False, True], ids=["untrusted", "trusted-proxy"])
def test_forwarded_for_and_zerogpu_tokens_make_no_new_callers_on_serve(demo_root, trusted):
    """With a cap of 2 places per caller, a burst from 127.0.0.1 claiming a new address (`X-Forwarded-For`) or a
    new ZeroGPU identity (`X-IP-Token`) per request is one caller, refused past its cap, unless the operator
    declared 127.0.0.1 a trusted proxy, where each forwarded address is a caller of its own. The token never is."""
    flags = ["--max-places-per-caller", "2", "--batch-window-ms", "50"]
    if trusted:
        flags += ["--trusted-proxies", "127.0.0.1"]
    with running(blink_serve(*flags), demo_root, name="serve-callers") as url:
        httpx.post(url + "/v1/systemone", json=body("warm", 0), timeout=120)
        forwarded = asyncio.run(burst(url, 8, lambda i: {"X-Forwarded-For": f"198.51.100.{i}"}))
        tokens = asyncio.run(burst(url, 8, lambda i: {"X-IP-Token": f"token-{i}"}))
    assert all(r.status_code in (200, 529) for r in forwarded + tokens)
    assert all("Retry-After" in r.headers for r in forwarded + tokens if r.status_code == 529)
    assert capped(tokens) >= 1  # the token makes no caller on serve
    if trusted:
        assert capped(forwarded) == 0
    else:
        assert capped(forwarded) >= 1
