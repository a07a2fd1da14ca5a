"""In-process checks of the Space's glue (no model): ZeroGPU errors -> HTTP, caller identity through the
batcher (one caller per GPU call), and the key scrubbed from logs."""

from __future__ import annotations

import ast
import logging
import threading
import time

import gradio as gr
import pytest

import auth
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


def test_the_key_is_scrubbed_from_every_log_record(capsys):
    from blink.settings import Settings
    from blink.web.auth import ApiKey
    from space import ui_api

    secret = "sk-unit-Wq93-never-logged"
    settings = Settings.from_values({"api_key": secret}, env={})
    key = ApiKey(settings.api_key)
    auth.keep_secrets_out_of_logs(settings.api_key)
    assert key.required and secret not in repr(key)
    handler = logging.StreamHandler()
    logger = logging.getLogger("blink.test-scrub")
    logger.addHandler(handler)
    try:
        logger.error("oops, the key is %s", secret)
        logger.error(f"inline {secret} too")
    finally:
        logger.removeHandler(handler)
    err = capsys.readouterr().err
    assert secret not in err and err.count(auth.REDACTED) == 2
    assert secret not in ui_api.key_note_md(key)


def test_scheduler_urls_are_scrubbed_from_logs(capsys):
    auth.keep_secrets_out_of_logs()
    handler = logging.StreamHandler()
    logger = logging.getLogger("blink.test-url-scrub")
    logger.addHandler(handler)
    try:
        logger.error('HTTP Request: POST http://x/schedule?taskId=1&durationSeconds=5&token=eyJ.secret.tok "200"')
        logger.error("POST http://x/release?allowToken=abc123&fail=false")
    finally:
        logger.removeHandler(handler)
    err = capsys.readouterr().err
    assert "eyJ.secret.tok" not in err and "abc123" not in err and "durationSeconds=5" in err
    assert logging.getLogger("httpx").level == logging.WARNING


@pytest.mark.parametrize(
    "line,secret,kept",
    [
        ('"GET /v1/models?api_key=sk-q-771 HTTP/1.1" 200', "sk-q-771", '"GET /v1/models?api_key='),
        ("GET /healthz?key=k-q-772&x=1", "k-q-772", "&x=1"),
        ("GET /v1/models?foo=1&access_token=at-q-773", "at-q-773", "?foo=1&access_token="),
        ("GET /v1/models?HF_TOKEN=hf_q774#frag", "hf_q774", "#frag"),
        ("GET /v1/models?x=1&client_secret=cs-q-775'", "cs-q-775", "?x=1&client_secret="),
    ],
)
def test_any_credential_in_a_query_string_is_scrubbed(capsys, line, secret, kept):
    """One scrubber for every record: a query value named like a key or token never reaches the log, while
    the rest of the line (path, other parameters, status) stays readable."""
    auth.keep_secrets_out_of_logs()
    handler = logging.StreamHandler()
    logger = logging.getLogger("blink.test-query-scrub")
    logger.addHandler(handler)
    try:
        logger.error("%s", line)
    finally:
        logger.removeHandler(handler)
    err = capsys.readouterr().err
    assert secret not in err and auth.REDACTED in err and kept in err


def test_one_log_record_factory_however_often_it_is_installed():
    auth.keep_secrets_out_of_logs("s-one")
    factory = logging.getLogRecordFactory()
    auth.keep_secrets_out_of_logs("s-two")
    auth.keep_secrets_out_of_logs("s-one")
    assert logging.getLogRecordFactory() is factory and isinstance(factory, auth.ScrubbedRecords)
    assert factory.secrets.count("s-one") == 1 and "s-two" in factory.secrets


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


def test_app_reads_top_to_bottom_and_builds_its_context_complete():
    """app.py: every module-level function uses only names bound above it (no forward reference: a GPU function
    reading a global defined later), and nothing bound at module scope is mutated after it is built
    (no `CTX.auth = ...`, no `CTX.live_health.append(...)`)."""
    import builtins

    from helpers import ROOT

    tree = ast.parse((ROOT / "app.py").read_text())
    bound: set[str] = set(dir(builtins))
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            free = _names_read_not_bound(node)
            assert free <= bound | {node.name}, (node.name, sorted(free - bound))
        for target in _assigned_targets(node):
            assert not (
                isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id in bound
            ), f"line {target.lineno}: {ast.unparse(target)} mutates a global"
        assert not _calls_a_method_of_ctx(node), (
            f"line {node.lineno}: {ast.unparse(node)} changes the context after it is built"
        )
        bound |= _names_bound_by(node)


def _names_read_not_bound(func) -> set[str]:
    """The names a function reads that it does not bind itself (arguments, assignments, `except ... as`)."""
    local = {a.arg for a in ast.walk(func.args) if isinstance(a, ast.arg)}
    local |= {n.id for n in ast.walk(func) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    local |= {n.name for n in ast.walk(func) if isinstance(n, ast.ExceptHandler) and n.name}
    used = {n.id for n in ast.walk(func) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return used - local


def _assigned_targets(node) -> list:
    """Every target of an assignment (plain or augmented) anywhere in `node`."""
    return [
        t
        for n in ast.walk(node)
        if isinstance(n, (ast.Assign, ast.AugAssign))
        for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
    ]


def _calls_a_method_of_ctx(node) -> bool:
    """`node` is a statement calling a method of one of the context's attributes (`CTX.live_health.append(...)`)."""
    if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)):
        return False
    func = node.value.func
    return (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Attribute)
        and isinstance(func.value.value, ast.Name)
        and func.value.value.id == "CTX"
    )


def _names_bound_by(node) -> set[str]:
    """The names a top-level statement binds: a function its own name only (what it binds inside is its own);
    any other statement every name stored, imported, or given to a function or class anywhere in it."""
    names = set()
    for n in ast.walk(node) if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else [node]:
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            names.add(n.id)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in n.names}
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
    return names


def test_the_api_tab_openai_snippet_sets_max_tokens():
    from blink.web.auth import ApiKey
    from space import ui_api

    snippet = ui_api.snippets_md("http://127.0.0.1:7860", "blink-4b", ApiKey())
    assert "client.chat.completions.create(" in snippet and "max_tokens=256" in snippet


def test_the_decide_form_is_checked_box_by_box_within_the_limits():
    from blink.errors import InvalidRequest
    from blink.limits import Limits
    from space import ui_form

    limits = Limits(max_options=3, max_levels=3)
    assert ui_form.options_problem("choice", "a\nb\nc\nd", limits) == "4 options: this Space answers at most 3."
    assert "Line 2 has no option name" in ui_form.options_problem("choice", "a: x\n: y", limits)
    assert ui_form.options_problem("choice", "a: first\nb", limits) is None
    assert ui_form.options_problem("score", "low\nhigh", limits) is None
    slots = ["team", "choice", "Which?", "a\nb", "team", "noul", "", "", "q3", "noul", "", "", "q4", "noul", "", ""]
    # only the questions asked (count) are checked; positions are the Decide event's inputs
    assert ui_form.form_problems("x", 1, slots, limits) == {}
    # question 2 repeats an id and has empty instructions: both refused, each next to its box (the wire would
    # accept empty instructions; in the form they are a question not yet written)
    problems = ui_form.form_problems("x", 2, slots, limits)
    assert set(problems) == {6, 8} and "Write the question" in problems[8]
    assert ui_form.form_problems("x", 2, [*slots[:6], "  \n ", *slots[7:]], limits).keys() == {6, 8}
    assert ui_form.box_name(6) == "Question 2 id" and ui_form.box_name(8) == "Question 2 instructions"
    # an empty state is told beside its box, not refused
    assert ui_form.form_problems("", 1, slots, limits) == {}
    assert "state is empty" in ui_form.state_note("  \n") and ui_form.state_note("x") is None
    refused = InvalidRequest(
        "question 'team': a choice question's `criteria` maps option names to descriptions",
        loc=["body", "questions", "team"],
    )
    assert (
        ui_form.wire_error_message(refused, ["urgent", "team"])
        == "Question 2 (team): the Options box maps option names to descriptions"
    )


@pytest.mark.parametrize(
    "mode,loaded,says,never",
    [
        ("fitted", True, ["calibrated for these weights (temperature scaling)."], ["lean", "own"]),
        ("fitted", False, ["model's own: no calibration is applied on this server"], ["calibrated", "lean"]),
        ("raw", True, ["model's own: no calibration is applied to these answers"], ["calibrated", "lean"]),
        ("raw", False, ["model's own: no calibration is applied to these answers"], ["calibrated", "lean"]),
        ("prior", True, ["lean towards some options", "no temperature scaling"], ["own", "calibrated for"]),
        ("prior", False, ["lean towards some options", "no temperature scaling"], ["own", "calibrated for"]),
        ("fitted+prior", True, ["calibrated for these weights (temperature scaling), then freed"], ["own"]),
        ("fitted+prior", False, ["lean towards some options", "no temperature scaling"], ["own", "calibrated for"]),
    ],
)
def test_the_decide_caveat_is_true_to_the_calibration_chosen(mode, loaded, says, never):
    """What the caveat beside answers says for each `x_calibration` (the server's default resolved), with and
    without a calibration file: temperature scaling only where one is loaded, the prior whenever it divides."""
    from space import ui_calibration

    caveat = ui_calibration.decide_caveat("Small model: calibrated estimates.", mode, loaded)
    applied = (loaded and mode in ("fitted", "fitted+prior")) or "prior" in mode  # every answer's `applied`
    assert caveat.startswith("Small model: calibrated estimates." if applied else "Small model: estimates.")
    note = caveat.split("estimates. ", 1)[1]
    assert all(words in note for words in says) and not any(words in note for words in never), note
    choices = ui_calibration.calibration_choices(mode, loaded)
    assert [value for _, value in choices] == [ui_calibration.SPACE_DEFAULT, "fitted", "prior", "fitted+prior", "raw"]
    assert ("none fitted for this model" in choices[1][0]) is not loaded
    assert ui_calibration.chosen_calibration(mode) == mode
    assert ui_calibration.chosen_calibration(ui_calibration.SPACE_DEFAULT) is None


def test_a_gradio_caller_has_shown_the_key_by_bearer_header_or_by_the_ui_login():
    """What counts as keyed on the Gradio side (the admission class and the decide endpoint's check)."""
    from starlette.requests import Request

    from auth import presented_key
    from blink.web.auth import ApiKey

    def starlette(headers: dict) -> Request:  # what Gradio's MCP server hands the tool
        raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
        return Request({"type": "http", "method": "POST", "path": "/", "headers": raw, "query_string": b""})

    key = ApiKey("sk-unit-key")
    logged_in = gr.Request(request=starlette({}), username="anyone")
    assert presented_key(key, logged_in)  # Gradio names a user only after its login, whose password is the key
    assert not presented_key(key, gr.Request(request=starlette({})))
    assert presented_key(key, gr.Request(request=starlette({"Authorization": "Bearer sk-unit-key"})))
    assert not presented_key(key, gr.Request(request=starlette({"Authorization": "Bearer sk-unit-kez"})))
    assert presented_key(key, starlette({"Authorization": "Bearer sk-unit-key"}))  # an MCP call's own request
    assert not presented_key(key, starlette({}))
    assert not presented_key(key, None)
    assert presented_key(ApiKey(None), None)  # no key set: everyone is keyed
    assert key.matches("sk-unit-key") and not key.matches("sk-unit-key ") and not key.matches(None)
    assert not ApiKey(None).matches("")  # no key: no password logs in


def test_a_scrubbed_access_log_line_still_formats_as_uvicorn_formats_it():
    """The record factory scrubs a credential inside an argument and keeps the arguments, which uvicorn's access
    formatter unpacks (flattening them made every such line a logging error)."""
    from uvicorn.logging import AccessFormatter

    from blink.web.guard import ScrubQuery

    auth.keep_secrets_out_of_logs("sk-unit-secret")
    access = logging.getLogger("uvicorn.access")
    args = ("127.0.0.1:5", "GET", "/v1/models?api_key=sk-unit-secret&x=1", "1.1", 200)
    record = access.makeRecord(access.name, logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d', args, None)
    assert len(record.args) == 5 and "sk-unit-secret" not in record.getMessage()
    line = AccessFormatter("%(client_addr)s %(request_line)s %(status_code)s", use_colors=False).format(record)
    assert "sk-unit-secret" not in line and "GET /v1/models?api_key=[redacted]" in line
    ScrubQuery().filter(record)  # the access log's own filter then drops the query whole
    assert "?[query removed]" in record.getMessage()


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


def test_the_answers_name_the_wires_confidence_formulas_and_count_levels_from_0():
    """The caption under the answers gives each answered type's formula, and the value it explains is the wire's
    (computed here by that formula from the probabilities); score levels are counted from 0 in the summary, as in
    the raw response's `score` beside it."""
    from transformers.decision import Question

    from blink.decide.answers import answer_from_probabilities
    from space import ui_answers

    choice_q = Question("team", "choice", "Which team?", ["a", "b", "c"], ["a", "b", "c"], [None] * 3)
    levels = ["Low", "Mid", "High", "Top"]
    score_q = Question("level", "score", "How high?", ["0", "1", "2", "3"], ["0", "1", "2", "3"], levels)
    choice = answer_from_probabilities(choice_q, [0.7, 0.2, 0.1])
    score = answer_from_probabilities(score_q, [0.1, 0.2, 0.6, 0.1])
    # the formulas as the caption states them
    assert choice["confidence"] == pytest.approx((0.7 - 1 / 3) / (1 - 1 / 3))
    d = sum(abs(i - 1.5) for i in range(4)) / 4
    assert score["confidence"] == pytest.approx(1 - (0.1 * 2 + 0.2 * 1 + 0.6 * 0 + 0.1 * 1) / d)
    questions = {"team": {"instructions": "Which team?"}, "level": {"instructions": "How high?"}}
    page = ui_answers.bars_html({"team": choice, "level": score}, questions)
    assert "(p_max − 1/n) / (1 − 1/n)" in page and "1 − Σ pᵢ·|i − top| / D" in page and "entropy" not in page
    assert f"score {score['score']:.2f} (the expected level)" in page and score["score"] == pytest.approx(1.7)
    assert "level 2 on a scale of 0 (Low) to 3 (Top)" in page and "of 1" not in page
    # only the formulas of the types answered
    alone = ui_answers.bars_html({"team": choice}, questions)
    assert "Confidence (choice)" in alone and "Confidence (score)" not in alone
    noul = ui_answers.bars_html({"u": {"type": "noul", "noul": 0.8}}, {})
    assert "Confidence" not in noul


def test_the_api_tab_gives_zerogpu_header_advice_only_on_zerogpu():
    from blink.web.auth import ApiKey
    from space import ui_api

    on = ui_api.snippets_md("http://127.0.0.1:7860", "blink-4b", ApiKey(), {"zero_gpu": True})
    off = ui_api.snippets_md("http://127.0.0.1:7860", "blink-4b", ApiKey(), {"zero_gpu": False})
    assert "X-HF-Authorization" in on and "ZeroGPU quota" in on
    assert "X-HF-Authorization" not in off and "ZeroGPU" not in off


def test_a_chat_reply_on_the_cpu_says_how_slow_before_and_while_it_streams():
    """The note above the chat: before the first token, that a reply can take a minute or more; while it streams,
    the rate measured and the most it may still take; after it, the last reply's rate for the next one. A refused
    turn leaves the rate as it was."""
    import time

    from space import ui_chat

    def replies(n: int, gap: float):
        text = ""
        for i in range(n):
            time.sleep(gap)
            text += f"w{i} "
            yield text

    speed = ui_chat.SpeedNote(512)
    turn = list(speed.turn(replies(6, 0.02)))
    assert turn[0][0] == "" and "can take a minute or more" in turn[0][1]  # before anything comes
    assert [text for text, _ in turn[1:-1]] == list(replies(6, 0))
    assert "~6 tokens at" in turn[-2][1] and "up to 512 in all" in turn[-2][1]
    assert speed.rate is not None and 10 < speed.rate < 60, speed.rate  # 5 gaps of ~20 ms
    assert f"about {speed.rate:.1f} tokens/s (the last reply)" in turn[-1][1] == speed.before()
    rate = speed.rate
    refused = list(speed.turn(iter([ui_chat.NOT_ANSWERED + "busy"])))
    assert refused[-1][0].startswith(ui_chat.NOT_ANSWERED) and speed.rate == rate


def test_the_rank_view_reads_one_document_a_line_and_shows_them_in_the_answers_order():
    """The Rank view's form (no model): one document per non-empty line, the form's gaps named by box, the wire's
    refusals told by box and line, and the documents drawn in the answer's order, each with its bar."""
    from blink.errors import InvalidRequest
    from space import ui_rank

    assert ui_rank.documents_of("first\n\n  \nsecond \n") == ["first", "second"]
    assert ui_rank.form_problem(" ", ["a"], 4).startswith("Query:")
    assert ui_rank.form_problem("q", [], 4).startswith("Documents:")
    assert "5 lines; this Space ranks at most 4" in ui_rank.form_problem("q", list("abcde"), 4)
    assert ui_rank.form_problem("q", ["a"], 4) is None
    refused = InvalidRequest(
        "documents[2] with the query makes a prompt past this server's context limit of 512 tokens",
        loc=["body", "documents", 2],
        kind="context_length_exceeded",
    )
    assert ui_rank.error_message(refused).startswith("Document 3: this document with the query makes a prompt")
    response = {
        "results": [
            {"index": 2, "relevance_score": 0.9, "document": {"text": "third"}},
            {"index": 0, "relevance_score": 0.4, "document": {"text": "x" * 1000}},
        ]
    }
    page = ui_rank.ranking_html(response, "Is it relevant to: q?")
    assert page.index('data-option="#1 · document 3"') < page.index('data-option="#2 · document 1"')
    assert 'class="blink-bar blink-top" data-option="#1 · document 3" data-p="0.900000"' in page
    assert "x" * ui_rank.SHOWN_CHARS + "…" in page and "x" * (ui_rank.SHOWN_CHARS + 1) not in page
    assert "2 documents, most relevant first" in page and "Is it relevant to: q?" in page


def test_the_moderate_view_draws_each_threshold_and_marks_what_it_flags():
    """The Moderate view (no model): text alone is sent as a string, with an image as parts (a PNG data URL the
    wire reads); a bar per category of the policy in its order, its threshold drawn at its place, the flagged
    ones marked and named; the wire's refusals told by box."""
    from PIL import Image

    from blink.api.moderations import inputs_of
    from blink.errors import InvalidRequest
    from blink.moderation_policy import Category, Policy
    from space import ui_moderate

    policy = Policy((Category("spam", "ads", 0.5), Category("hate", "hate", 0.25)), "custom.toml")
    assert ui_moderate.input_of("hello") == "hello"
    parts = ui_moderate.input_of("hello", Image.new("RGB", (4, 4)))
    assert [p["type"] for p in parts] == ["text", "image_url"]
    assert parts[1]["image_url"]["url"].startswith("data:image/png;base64,")
    assert [p["type"] for p in ui_moderate.input_of("  ", Image.new("RGB", (4, 4)))] == ["image_url"]
    (item,) = inputs_of({"input": parts}, policy, 8)  # the wire reads what the view sends
    assert item.types == ["text", "image"] and set(item.body["questions"]) == {"spam", "hate"}
    assert ui_moderate.form_problem(" ") == "Text: write the text to moderate."
    assert ui_moderate.form_problem(" ", Image.new("RGB", (4, 4))) is None
    result = {"categories": {"spam": False, "hate": True}, "category_scores": {"spam": 0.49, "hate": 0.3}}
    page = ui_moderate.categories_html(policy, result)
    assert page.index('data-option="spam"') < page.index('data-option="hate"')
    assert '<div class="blink-bar" data-option="spam"' in page
    assert '<div class="blink-bar blink-flagged" data-option="hate"' in page
    assert 'class="blink-mark" style="left:50.0%"' in page and 'style="left:25.0%"' in page
    assert '<small class="blink-desc">threshold 0.25</small>' in page
    assert "<b>flagged</b>: hate" in page
    calm = ui_moderate.categories_html(policy, {**result, "categories": {"spam": False, "hate": False}})
    assert "<b>not flagged</b>" in calm and "blink-flagged" not in calm
    refused = InvalidRequest("this server's model reads text only: images are not accepted", loc=["body", "input"])
    assert ui_moderate.error_message(refused).startswith("Image: this server's model reads text only")
    too_long = InvalidRequest("the input is too long", loc=["body", "input"])
    assert ui_moderate.error_message(too_long) == "Text: the input is too long"
