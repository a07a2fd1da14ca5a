"""In-process checks of the Space's ZeroGPU glue (no model): ZeroGPU errors -> HTTP, caller identity through the
batcher (one caller per GPU call), a GPU call's seconds asked and used, and what crosses to the GPU worker."""

from __future__ import annotations

import threading
import time

import gradio as gr
import pytest

from blink.decide.batching import Batcher
from blink.errors import EngineFailure, GPUUnavailable, QuotaExceeded
from blink.plan import Scored
from space import zerogpu

pytestmark = pytest.mark.space


# the titles and messages `spaces` 0.51.3 raises (spaces/zero/client.py, wrappers.py)
@pytest.mark.parametrize(
    "title,message,cls,status,retry_after",
    [
        (
            "ZeroGPU quota exceeded",
            "You have exceeded your free ZeroGPU quota (30s requested vs. 7s left). Try again in 1:02:03. ",
            QuotaExceeded,
            429,
            "3723",
        ),
        (
            "ZeroGPU quota exceeded",
            "You have exceeded your ZeroGPU quota (30s requested vs. 0s left). Try again in 1 day, 0:00:05. ",
            QuotaExceeded,
            429,
            "86405",
        ),
        (
            "ZeroGPU quota exceeded",
            "Space app has reached its GPU limit. Try re-running outside of examples",
            QuotaExceeded,
            429,
            "3600",
        ),
        (
            "ZeroGPU illegal duration",
            "The requested GPU duration (900s) is larger than the maximum allowed",
            QuotaExceeded,
            429,
            "60",
        ),
        (
            "ZeroGPU pending credits exceeded",
            "You have too many ZeroGPU credits allocated to running tasks.",
            QuotaExceeded,
            429,
            "60",
        ),
        (
            "ZeroGPU quota exceeded",
            "No GPU was available after 60s. Try re-running outside of examples",
            GPUUnavailable,
            503,
            "30",
        ),
        ("ZeroGPU queue timeout", "No GPU was available after 60s <a href='x'>Sign up</a>", GPUUnavailable, 503, "30"),
        ("ZeroGPU client error", "No GPU was available", GPUUnavailable, 503, "10"),
        ("ZeroGPU client error", "Expired ZeroGPU proxy token", GPUUnavailable, 503, "10"),
        ("ZeroGPU worker error", "ValueError", EngineFailure, 500, None),
        ("ZeroGPU worker error", "GPU task aborted", EngineFailure, 500, None),
    ],
)
def test_zerogpu_errors_map_to_http(title, message, cls, status, retry_after, caplog):
    error = zerogpu.map_gpu_errors(gr.Error(message, title=title), zero_gpu=True)
    assert type(error) is cls and error.status == status
    assert error.headers.get("Retry-After") == retry_after
    if status == 429:
        assert error.headers["x-should-retry"] == "false"
    assert "<a" not in error.message  # HTML toasts stripped
    if cls is EngineFailure:
        assert message in caplog.text  # the real reason is logged


def test_scheduler_runtime_errors_are_503_only_on_zerogpu():
    exc = RuntimeError("ZeroGPU API /schedule error: 502 (Bad Gateway)")
    assert isinstance(zerogpu.map_gpu_errors(exc, zero_gpu=True), GPUUnavailable)
    assert zerogpu.map_gpu_errors(exc, zero_gpu=False) is exc
    other = ValueError("ours")
    assert zerogpu.map_gpu_errors(other, zero_gpu=True) is other


def test_caller_identity_becomes_a_gradio_request():
    caller = zerogpu.caller_from_headers({"x-ip-token": "tok-1", "authorization": "Bearer k"})
    assert caller == (("x-ip-token", "tok-1"),)  # only the identity header travels
    assert zerogpu.caller_from_headers({"authorization": "Bearer k"}) is None
    from gradio.context import LocalContext

    with zerogpu.as_caller(caller):
        request = LocalContext.request.get()
        assert request.headers.get("x-ip-token") == "tok-1"  # what spaces reads (client._get_headers)
    assert LocalContext.request.get(None) is None
    with zerogpu.as_caller(None):
        assert LocalContext.request.get() is None


def test_the_spaces_caller_is_the_zerogpu_identity_else_the_user_else_the_proxied_address():
    """Fair shares and quota alike: the same person through a route (a Starlette request) and through the UI or
    Gradio's API (a gr.Request) is the same caller; the token itself is never the key."""
    from starlette.requests import Request

    from blink.web.callers import Peers, quota_of

    def starlette(headers: dict, peer: str = "10.0.0.7") -> Request:
        raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
        return Request({"type": "http", "method": "POST", "path": "/", "headers": raw, "client": (peer, 1)})

    peers = Peers()
    token = {"X-IP-Token": "tok-1", "X-Forwarded-For": "6.6.6.6, 198.51.100.4"}
    route = zerogpu.space_caller(starlette(token), peers)
    ui = zerogpu.space_caller(gr.Request(request=starlette(token, peer="10.0.0.8")), peers)
    assert route == ui and route.key.startswith("zerogpu:") and "tok-1" not in route.key
    assert quota_of(route) == (("x-ip-token", "tok-1"),)
    with zerogpu.as_caller(route):  # the backend is handed the Caller: spaces still reads the token
        from gradio.context import LocalContext

        assert LocalContext.request.get().headers.get("x-ip-token") == "tok-1"
    signed_in = gr.Request(request=starlette({}), username="alice")
    assert zerogpu.space_caller(signed_in, peers).key == "user:alice"
    # no token, nobody signed in: the address the Space's proxy reports (its right-most X-Forwarded-For entry)
    proxied = zerogpu.space_caller(starlette({"X-Forwarded-For": "6.6.6.6, 198.51.100.4"}), peers)
    assert proxied.key == "ip:198.51.100.4" and proxied.quota is None


def test_a_batch_holds_one_callers_requests_and_runs_as_that_caller():
    seen: list[tuple] = []

    def run(plans, caller):
        seen.append((caller, list(plans)))
        return [Scored(p) for p in plans]

    gate = threading.Event()

    def blocker(plans, caller):  # hold the thread until all jobs are queued, so the window sees them all
        gate.wait(5)
        return run(plans, caller)

    batcher = Batcher(blocker, window_s=0.3, max_batch=16, max_queued=64)
    jobs = []
    for caller, plan in [("A", "a0"), ("A", "a1"), ("B", "b0"), ("A", "a2"), (None, "n0"), ("B", "b1")]:
        jobs.append(batcher.submit(plan, caller))
    time.sleep(0.05)
    gate.set()
    for job in jobs:
        assert job.future.result(timeout=10).error is None
    by_caller = {}
    for caller, plans in seen:
        by_caller.setdefault(caller, []).append(plans)
    # every GPU call ran as exactly one caller, with only that caller's requests
    for caller, plans in seen:
        assert all(p[0] == (caller or "n").lower() for p in plans)
    assert sorted(p for batches in by_caller.values() for b in batches for p in b) == [
        "a0",
        "a1",
        "a2",
        "b0",
        "b1",
        "n0",
    ]
    assert len(seen) <= 4  # a0 alone (already taken), then A, B and None batches at most
    assert batcher.stats()["queued"] == 0


def test_callers_take_turns_without_a_window():
    """Each caller's requests in arrival order; between callers, fair turns: a caller with one request waiting
    goes before another caller's second (blink.web.fair_queue)."""
    order, busy = [], threading.Event()

    def score(plans, caller):
        if plans == ["first"]:
            busy.wait(10)  # the thread busy while the others queue up behind it
        order.extend(plans)
        return [("ok", 1)] * len(plans)

    batcher = Batcher(score)
    jobs = [batcher.submit("first", "X")]
    time.sleep(0.05)
    for i, caller in enumerate(["A", "B", "A", "C"]):
        jobs.append(batcher.submit(i, caller))
    busy.set()
    for job in jobs:
        job.future.result(timeout=10)
    assert order == ["first", 0, 1, 3, 2]


def test_a_gpu_call_asks_once_runs_as_the_caller_and_accounts_what_it_used():
    """GpuCall: the seconds it records as requested are the seconds its duration callable hands ZeroGPU, the
    first step runs as the caller, and the compute seconds the worker reports are accounted as used."""
    from gradio.context import LocalContext

    from space.durations import DurationEstimator

    estimator = DurationEstimator(min_s=2, max_s=60, cold_s=5)
    seen = {}

    def worker(plans, seconds):  # where the `@spaces.GPU` function would run
        seen.update(
            duration=zerogpu.GpuCall.duration(plans, seconds=seconds),
            token=LocalContext.request.get().headers.get("x-ip-token"),
        )
        return {"compute_s": 0.25}

    with zerogpu.GpuCall(
        "decide", estimator, zero_gpu=False, caller=(("x-ip-token", "tok-u"),), prefill_tokens=300, max_s=30
    ) as call:
        out = call.run(worker, ["plan"])
        call.used(out["compute_s"])
    ledger = estimator.health()["decide"]
    assert ledger["calls"] == 1 and ledger["last_requested_s"] == seen["duration"] == call.seconds
    assert 2 <= call.seconds <= 30 and seen["token"] == "tok-u"
    assert ledger["used_s"] == 0.25 and estimator.warm and estimator.prefill.observations == 1


def test_a_gpu_stream_left_early_closes_the_worker_and_is_accounted_once():
    from blink.generate.chat_engine import ChatEnd
    from space.durations import DurationEstimator

    estimator = DurationEstimator()
    closed = []

    def worker(ids, params, seconds):
        try:
            for i in range(100):
                yield f"t{i} "
            yield ChatEnd("length", len(ids), 100, compute_s=1.0)
        finally:
            closed.append(True)

    def chat():
        with zerogpu.GpuCall(
            "chat", estimator, zero_gpu=False, caller=None, prefill_tokens=3, decode_tokens=100
        ) as call:
            yield from call.stream(worker([1, 2, 3], {}, seconds=call.seconds))

    stream = chat()
    assert [next(stream) for _ in range(3)] == ["t0 ", "t1 ", "t2 "]
    stream.close()  # the client left
    assert closed == [True]
    ledger = estimator.health()["chat"]
    assert ledger["calls"] == 1 and ledger["used_s"] == 0.0 and estimator.ledger("chat").wall_s > 0
    assert estimator.decode.observations == 0  # nothing learned from a turn that did not finish

    items = list(chat())  # a turn that finishes: its ChatEnd's compute seconds are used and learned from
    assert isinstance(items[-1], ChatEnd) and len(items) == 101
    ledger = estimator.health()["chat"]
    assert ledger["calls"] == 2 and ledger["used_s"] == 1.0 and estimator.decode.observations == 1


@pytest.mark.parametrize(
    "title,cls,cold", [("ZeroGPU worker error", EngineFailure, True), ("ZeroGPU quota exceeded", QuotaExceeded, False)]
)
def test_a_failed_gpu_call_leaves_as_the_wire_error_and_only_a_worker_failure_makes_it_cold(title, cls, cold):
    from space.durations import DurationEstimator

    estimator = DurationEstimator()
    estimator.warm = True

    def worker(plans, seconds):
        raise gr.Error("GPU task aborted. Try again in 0:00:05.", title=title)

    with pytest.raises(cls):
        with zerogpu.GpuCall("decide", estimator, zero_gpu=True, caller=None, prefill_tokens=10) as call:
            call.run(worker, [])
    assert estimator.warm is (not cold)
    assert estimator.health()["decide"]["used_s"] == 0.0 and estimator.health()["decide"]["calls"] == 1


def test_generation_params_are_plain_frozen_data_that_pickle_to_the_gpu_worker():
    """What the Space's `@spaces.GPU` chat function receives crosses ZeroGPU's process boundary by pickle."""
    import pickle
    from dataclasses import FrozenInstanceError, replace

    from blink.plan import GenerationParams

    params = GenerationParams(temperature=0.5, seed=7, stop=["</a>"], constraint={"type": "json_object"})
    assert params.stop == ("</a>",) and params.images == ()  # sequences kept as tuples
    assert pickle.loads(pickle.dumps(params)) == params
    budgeted = replace(params, max_tokens=12)
    assert (budgeted.max_tokens, budgeted.stop, params.max_tokens) == (12, ("</a>",), None)
    with pytest.raises(FrozenInstanceError):
        params.max_tokens = 3
