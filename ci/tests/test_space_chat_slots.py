"""The Space's chat slots with a key set: anonymous UI chats never take a slot while keyed API chats hold the
places anonymous callers may take, however many wait, and a UI chat that waits past `chat_slot_wait_s` is answered
with a refusal at that moment (a reply that says so, not model output).

This is the account of a reading once taken for a slip: with four keyed streams holding every slot, one of four
anonymous UI chats "produced output" at 30.2 s, before a keyed stream ended (30.8 s). The default wait is 30 s: what
it produced then was the refusal. Here the gate is watched while keyed and anonymous chats contend, in-process on a
real context (the demo model), so every transition is seen, not only what reaches a client."""

from __future__ import annotations

import threading
import time
from contextlib import ExitStack

import pytest

from space import ui_chat

pytestmark = pytest.mark.space

WAIT_S = 2.0  # chat_slot_wait_s: the longest an anonymous UI chat waits for a slot


@pytest.fixture(scope="module")
def ctx(demo_dir):
    from blink.backend import LocalBackend
    from blink.server import build_context, load_served
    from blink.settings import Settings

    settings = Settings.from_values(
        {"model": str(demo_dir), "max_concurrent_chats": 4, "chat_slot_wait_s": WAIT_S, "api_key": "sk-unit-key"},
        env={},
    )
    served = load_served(settings)
    return build_context(settings, served, LocalBackend(served.planner, served.chat_engine), warmup=False)


class GateWatch:
    """Samples the chat gate's places until stopped: every (keyed, anonymous) pair seen."""

    def __init__(self, gate):
        self.gate, self.seen, self.stop = gate, set(), threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.stop.is_set():
            with self.gate.lock:
                self.seen.add((self.gate.held["keyed"], self.gate.held["anonymous"]))
            time.sleep(0.001)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def ui_turn(ctx, out: list, started: float):
    """One anonymous Chat-tab turn (no login, no bearer header): its first reply and when it came."""
    first = next(ui_chat.chat_reply(ctx, 4, "Hello", [], None))
    out.append((time.monotonic() - started, first))


def test_anonymous_ui_chats_wait_then_are_refused_while_keyed_chats_hold_every_slot(ctx):
    gate = ctx.admission.gate("chat")
    assert gate.policy.capacity == 4 and gate.policy.reserved == 1  # anonymous callers may hold at most 3
    replies: list = []
    with GateWatch(gate) as watch, ExitStack() as keyed:
        for _ in range(4):  # four keyed API chats (blink.web.endpoint admits every API caller as keyed)
            keyed.enter_context(ctx.admission.enter_sync("chat", "keyed"))
        started = time.monotonic()
        turns = [threading.Thread(target=ui_turn, args=(ctx, replies, started)) for _ in range(4)]
        for t in turns:
            t.start()
        for t in turns:
            t.join(WAIT_S * 10)
    assert len(replies) == 4
    for seconds, reply in replies:
        # the refusal comes when the wait ends, as the turn's reply: what the 30.2 s reading saw at the 30 s default
        assert reply.startswith(ui_chat.NOT_ANSWERED) and "busy" in reply, reply
        assert WAIT_S * 0.9 <= seconds < WAIT_S * 5, seconds
    assert all(anonymous == 0 for _, anonymous in watch.seen), watch.seen  # no anonymous place was ever taken


def test_an_anonymous_ui_chat_gets_a_slot_only_when_keyed_chats_leave_it_one(ctx):
    gate = ctx.admission.gate("chat")
    replies: list = []
    with GateWatch(gate) as watch, ExitStack() as keyed:
        places = [ExitStack() for _ in range(4)]
        for place in places:
            place.enter_context(ctx.admission.enter_sync("chat", "keyed"))
            keyed.enter_context(place)
        started = time.monotonic()
        turn = threading.Thread(target=ui_turn, args=(ctx, replies, started))
        turn.start()
        time.sleep(WAIT_S / 4)
        places[0].close()  # one keyed chat ends: 3 held, the reserved place is all that is free
        time.sleep(WAIT_S / 4)
        assert not replies  # still waiting: the free place is kept for keyed callers
        places[1].close()  # a second ends: an anonymous caller may take a place now
        turn.join(WAIT_S * 30)
    ((_, reply),) = replies
    assert not reply.startswith(ui_chat.NOT_ANSWERED), reply  # model output, generated in the freed slot
    assert (4, 1) not in watch.seen and (3, 1) not in watch.seen, watch.seen
    assert (2, 1) in watch.seen, watch.seen  # it ran beside the two keyed chats still held
