"""The OpenAI Batch API on `serve` (`/v1/files`, `/v1/batches`), driven by the real `openai` SDK against one server
with a key and its own data dir: a `/v1/decisions` batch and a `/v1/systemone` batch run to `completed`, their
output lines equal to what the route answers to the same requests (floats within 1e-6) and the route's refusals in
the error file; list with `after`/`limit`; cancel (the lines not run each an error line, `batch_cancelled`); a file
with a bad line fails the batch with OpenAI's `errors`; uploads past the size knob, other purposes and bad bodies
are 4xx in OpenAI's shape; 401 without the key; the 404 that says why on a server without a key; the figures in
/healthz (no data dir there) and /metrics. Last, the server is SIGKILLed mid-batch and started again on the same
data dir: the batch finishes with every line exactly once."""

from __future__ import annotations

import io
import json
import os
import signal
import time
from pathlib import Path

import httpx
import openai
import pytest

from helpers import ARTIFACTS, blink_serve, free_port, launch, server_env, stop_group, wait_healthy
from helpers.batch import close

pytestmark = pytest.mark.e2e

KEY = "batch-key-123"
MAX_UPLOAD = 256 * 1024
QUOTA = 1_500_000  # the data dir's bytes: a few uploads past what the other tests keep
CHUNK = 8
QUESTIONS = {
    "refund": {"type": "noul", "instructions": "Is the customer asking for money back?"},
    "team": {"type": "choice", "instructions": "Which team?", "criteria": {"billing": None, "technical": None}},
}
DECISION_QUESTIONS = [
    {"type": "predicate", "name": "damaged", "instructions": "Was the item damaged?"},
    {"type": "choice", "instructions": "Which team?", "choices": [{"value": "returns"}, {"value": "billing"}]},
]


class BatchServer:
    """`serve` with a key and a data dir, on one port, started again on the same data dir by `restart`."""

    def __init__(self, demo_root: Path, data_dir: Path):
        self.port, self.data_dir = free_port(), data_dir
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = server_env(
            demo_root,
            {
                "BLINK_API_KEY": KEY,
                "BLINK_DATA_DIR": str(data_dir),
                "BLINK_MAX_UPLOAD_BYTES": str(MAX_UPLOAD),
                "BLINK_DATA_QUOTA_BYTES": str(QUOTA),
                "BLINK_BATCH_CHUNK_ROWS": str(CHUNK),
                "BLINK_BATCH_WINDOW_MS": "5",
                "BLINK_PREFIX_CACHE_MIB": "0",  # answers compared with the route's own: no cached tokens in either
            },
        )
        self.proc = None
        self.start()

    def start(self) -> None:
        log = ARTIFACTS / f"serve-batch-api-{self.port}-{int(time.time())}.log"
        self.proc = launch(blink_serve(), self.port, self.env, log)
        wait_healthy(self.url, self.proc, log)

    def kill(self) -> None:
        """SIGKILL, nothing gentler first: the store must hold whatever it committed, and only that."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=15)
        self.proc = None


@pytest.fixture(scope="module")
def batch_server(demo_root, tmp_path_factory):
    served = BatchServer(demo_root, tmp_path_factory.mktemp("batch-api-data"))
    yield served
    if served.proc is not None:
        stop_group(served.proc)


@pytest.fixture(scope="module")
def client(batch_server):
    return openai.OpenAI(base_url=batch_server.url + "/v1", api_key=KEY, max_retries=0)


def line(custom_id: str, url: str, body: dict) -> dict:
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": body}


def upload(client, lines: list, name: str = "in.jsonl"):
    data = "".join((json.dumps(x) if isinstance(x, dict) else x) + "\n" for x in lines).encode()
    return client.files.create(file=(name, io.BytesIO(data)), purpose="batch")


def finished(client, batch_id: str, timeout: float = 120):
    deadline = time.time() + timeout
    while True:
        batch = client.batches.retrieve(batch_id)
        if batch.status in ("completed", "failed", "cancelled", "expired"):
            return batch
        assert time.time() < deadline, f"batch still {batch.status}: {batch.request_counts}"
        time.sleep(0.1)


def read(client, file_id: str) -> list[dict]:
    return [json.loads(x) for x in client.files.content(file_id).text.splitlines()]


def tickets(n: int, prefix: str = "") -> list[str]:
    return [f"{prefix}Ticket {i}: I was charged twice for order {i}. Please refund." for i in range(n)]


CASES = {
    "/v1/decisions": [{"model": "demo", "input": text, "questions": DECISION_QUESTIONS} for text in tickets(5)],
    "/v1/systemone": [{"model": "demo", "state": text, "questions": QUESTIONS} for text in tickets(5, "S")],
}
REFUSED = {"/v1/decisions": {"model": "demo", "input": "x"}, "/v1/systemone": {"model": "demo", "state": "x"}}


@pytest.mark.parametrize("endpoint", list(CASES))
def test_a_batch_answers_what_the_route_answers(client, batch_server, endpoint):
    bodies = CASES[endpoint]
    lines = [line(f"row-{i}", endpoint, body) for i, body in enumerate(bodies)]
    lines.insert(2, line("refused", endpoint, REFUSED[endpoint]))  # no questions: the route's own 4xx
    source = upload(client, lines)
    assert source.purpose == "batch" and source.bytes > 0 and source.object == "file"
    batch = client.batches.create(
        input_file_id=source.id, endpoint=endpoint, completion_window="24h", metadata={"job": "tickets"}
    )
    assert batch.status == "validating" and batch.metadata == {"job": "tickets"}
    batch = finished(client, batch.id)
    assert batch.status == "completed", batch
    assert (batch.request_counts.total, batch.request_counts.completed, batch.request_counts.failed) == (6, 5, 1)
    assert batch.in_progress_at and batch.finalizing_at and batch.completed_at and batch.errors is None
    output, errors = read(client, batch.output_file_id), read(client, batch.error_file_id)
    assert [o["custom_id"] for o in output] == [f"row-{i}" for i in range(5)]
    headers = {"Authorization": f"Bearer {KEY}"}
    for out, body in zip(output, bodies):
        assert out["id"].startswith("batch_req_") and out["error"] is None
        alone = httpx.post(batch_server.url + endpoint, json=body, headers=headers, timeout=60)
        assert out["response"]["status_code"] == alone.status_code == 200
        close(out["response"]["body"], alone.json())
    (refused,) = errors
    alone = httpx.post(batch_server.url + endpoint, json=REFUSED[endpoint], headers=headers, timeout=60)
    assert refused["custom_id"] == "refused" and refused["response"]["status_code"] == alone.status_code
    assert 400 <= alone.status_code < 500
    close(refused["response"]["body"], alone.json())
    assert client.files.retrieve(batch.output_file_id).purpose == "batch_output"


def test_list_pages_with_after_and_limit(client):
    source = upload(client, [line("one", "/v1/systemone", CASES["/v1/systemone"][0])])
    made = [client.batches.create(input_file_id=source.id, endpoint="/v1/systemone", completion_window="24h").id]
    made.append(client.batches.create(input_file_id=source.id, endpoint="/v1/systemone", completion_window="24h").id)
    first = client.batches.list(limit=1)
    assert [b.id for b in first.data] == [made[1]] and first.has_more  # newest first, as OpenAI lists
    second = client.batches.list(after=made[1], limit=1)
    assert [b.id for b in second.data] == [made[0]]
    everything = [b.id for b in client.batches.list(limit=100).data]
    assert [b.id for b in client.batches.list(limit=2)] == everything  # the SDK's pages, through `after`
    assert len(everything) == len(set(everything)) >= 2
    with pytest.raises(openai.NotFoundError, match="no batch 'batch_gone' here"):  # never a page from the start
        client.batches.list(after="batch_gone")
    files = client.files.list(purpose="batch")
    assert source.id in [f.id for f in files.data] and all(f.purpose == "batch" for f in files.data)
    for batch_id in made:
        assert finished(client, batch_id).status == "completed"


def test_cancel(client):
    bodies = [{"model": "demo", "state": text, "questions": QUESTIONS} for text in tickets(60, "C")]
    source = upload(client, [line(f"c{i}", "/v1/systemone", b) for i, b in enumerate(bodies)])
    batch = client.batches.create(input_file_id=source.id, endpoint="/v1/systemone", completion_window="24h")
    cancelling = client.batches.cancel(batch.id)
    assert cancelling.status in ("cancelling", "cancelled") and cancelling.cancelling_at
    batch = finished(client, batch.id)
    assert batch.status == "cancelled" and batch.cancelled_at
    counts = batch.request_counts
    assert counts.completed < 60 and counts.completed + counts.failed == 60  # stopped before the end; every line told
    answered = read(client, batch.output_file_id) if batch.output_file_id else []
    not_run = read(client, batch.error_file_id)
    assert len(answered) == counts.completed and len(not_run) == counts.failed
    assert sorted(x["custom_id"] for x in answered + not_run) == sorted(f"c{i}" for i in range(60))  # each once
    for x in not_run:  # OpenAI's code for a line a cancel stopped
        assert x["response"] is None and x["error"]["code"] == "batch_cancelled", x
    assert client.batches.cancel(batch.id).status == "cancelled"  # again: as it is
    one = upload(client, [line("done", "/v1/systemone", CASES["/v1/systemone"][0])])  # a batch of its own to finish
    completed = finished(
        client, client.batches.create(input_file_id=one.id, endpoint="/v1/systemone", completion_window="24h").id
    )
    assert completed.status == "completed"
    with pytest.raises(openai.ConflictError, match="only a validating or in_progress batch"):
        client.batches.cancel(completed.id)


def test_a_line_for_another_endpoint_fails_the_batch_and_other_bad_lines_are_error_lines(client):
    good = line("good", "/v1/decisions", CASES["/v1/decisions"][0])
    source = upload(client, [good, line("wrong", "/v1/systemone", CASES["/v1/systemone"][0]), "this is not json"])
    batch = finished(
        client, client.batches.create(input_file_id=source.id, endpoint="/v1/decisions", completion_window="24h").id
    )
    assert batch.status == "failed" and batch.failed_at and batch.output_file_id is None
    assert [(e.code, e.line) for e in batch.errors.data] == [("invalid_url", 2)]  # OpenAI's rule: one endpoint
    assert "/v1/decisions" in batch.errors.data[0].message
    # a line that is not JSON, one without a custom_id, one seen before: each its own error line, the rest answered
    again = line("good", "/v1/decisions", CASES["/v1/decisions"][0])
    source = upload(client, [good, "this is not json", {"method": "POST", "url": "/v1/decisions", "body": {}}, again])
    batch = finished(
        client, client.batches.create(input_file_id=source.id, endpoint="/v1/decisions", completion_window="24h").id
    )
    assert batch.status == "completed", batch.errors
    assert (batch.request_counts.total, batch.request_counts.completed, batch.request_counts.failed) == (4, 1, 3)
    answered = [json.loads(x) for x in client.files.content(batch.output_file_id).text.splitlines()]
    assert [a["custom_id"] for a in answered] == ["good"]
    refused = [json.loads(x)["error"]["code"] for x in client.files.content(batch.error_file_id).text.splitlines()]
    assert refused == ["invalid_json_line", "missing_custom_id", "duplicate_custom_id"]
    empty = upload(client, [], name="empty.jsonl")
    batch = finished(
        client, client.batches.create(input_file_id=empty.id, endpoint="/v1/decisions", completion_window="24h").id
    )
    assert batch.status == "failed" and batch.errors.data[0].code == "empty_file"


def test_bad_requests_are_openais_4xx(client, batch_server):
    with pytest.raises(openai.APIStatusError) as too_big:
        client.files.create(file=("big.jsonl", io.BytesIO(b"x" * (MAX_UPLOAD + 1))), purpose="batch")
    assert too_big.value.status_code == 413 and "max_upload_bytes" in too_big.value.message
    with pytest.raises(openai.BadRequestError, match='`purpose` must be "batch"'):
        client.files.create(file=("a.jsonl", io.BytesIO(b"{}\n")), purpose="fine-tune")
    source = upload(client, [line("one", "/v1/systemone", CASES["/v1/systemone"][0])])
    with pytest.raises(openai.BadRequestError, match="is not one a batch runs"):
        client.batches.create(input_file_id=source.id, endpoint="/v1/embeddings", completion_window="24h")
    with pytest.raises(openai.BadRequestError, match="completion_window"):
        client.batches.create(input_file_id=source.id, endpoint="/v1/systemone", completion_window="1h")
    headers = {"Authorization": f"Bearer {KEY}"}
    raw = httpx.post(batch_server.url + "/v1/files", content=b"{}", headers=headers)
    assert raw.status_code == 400 and raw.json()["error"]["code"] == "unsupported_media"
    extra = httpx.post(
        batch_server.url + "/v1/files",
        files={"file": ("a", b"x")},
        data={"purpose": "batch", "note": "x"},
        headers=headers,
    )
    assert extra.status_code == 400 and "'note'" in extra.json()["error"]["message"]
    assert client.files.delete(source.id).deleted
    with pytest.raises(openai.NotFoundError):
        client.files.content(source.id)


def test_a_file_or_batch_not_here_is_one_404_wherever_it_is_named(client):
    """A path, `input_file_id` or a page's `after`: one status, one wording, OpenAI's shape (NotFoundError)."""
    gone = {"file": "file-nope", "batch": "batch_nope"}
    asks = [
        ("file", "path.file_id", lambda: client.files.retrieve(gone["file"])),
        ("file", "path.file_id", lambda: client.files.content(gone["file"])),
        ("file", "path.file_id", lambda: client.files.delete(gone["file"])),
        ("file", "query.after", lambda: client.files.list(after=gone["file"])),
        (
            "file",
            "input_file_id",
            lambda: client.batches.create(
                input_file_id=gone["file"], endpoint="/v1/systemone", completion_window="24h"
            ),
        ),
        ("batch", "path.batch_id", lambda: client.batches.retrieve(gone["batch"])),
        ("batch", "path.batch_id", lambda: client.batches.cancel(gone["batch"])),
        ("batch", "query.after", lambda: client.batches.list(after=gone["batch"])),
    ]
    for what, param, ask in asks:
        with pytest.raises(openai.NotFoundError) as refused:
            ask()
        assert refused.value.status_code == 404
        assert refused.value.body == {
            "message": f"no {what} {gone[what]!r} here (or it expired)",
            "type": "invalid_request_error",
            "param": param,
            "code": "not_found",
        }


def test_an_upload_past_the_quota_is_refused(client):
    kept, refused = [], None
    for _ in range(QUOTA // (MAX_UPLOAD - 16) + 2):
        try:
            kept.append(client.files.create(file=("f.jsonl", io.BytesIO(b"x" * (MAX_UPLOAD - 16))), purpose="batch"))
        except openai.BadRequestError as error:
            refused = error
            break
    assert refused is not None and refused.code == "storage_quota_exceeded", refused
    assert "data_quota_bytes" in refused.message
    for f in kept:
        client.files.delete(f.id)
    upload(client, [line("fits", "/v1/systemone", CASES["/v1/systemone"][0])])  # room again


def test_files_and_batches_expire_after_the_retention(tmp_path):
    from blink.batch.store import Store

    store = Store(str(tmp_path), retention_s=3600, quota_bytes=1 << 20)
    store.path("file-a").write_bytes(b"{}\n")
    made = store.add_file("file-a", "a.jsonl", "batch", 3)
    batch = {"id": "batch_a", "status": "completed", "created_at": made["created_at"], "request_counts": {}}
    store.add_batch(batch)
    assert made["expires_at"] == made["created_at"] + 3600
    store.forget_expired(time.time())
    assert store.file("file-a") and store.batch("batch_a")
    store.forget_expired(made["created_at"] + 3600)
    assert store.file("file-a") is None and store.batch("batch_a") is None and not store.path("file-a").exists()


def test_an_expired_batch_tells_every_line_not_run(tmp_path):
    """A batch past its 24 hours ends `expired`, and each line not run is an error line with OpenAI's
    `batch_expired` (a line refused on its own keeps its own error): every input line has one output line. The real
    worker and store; no row runs, so no model is needed."""
    import asyncio

    from blink.batch.jobs import BatchSettings, Jobs
    from blink.batch.worker import Worker

    jobs = Jobs(BatchSettings(str(tmp_path), KEY, MAX_UPLOAD, QUOTA, 3600, CHUNK, 1 << 20))
    lines = [line(f"e{i}", "/v1/systemone", CASES["/v1/systemone"][0]) for i in range(3)]
    data = "".join(json.dumps(x) + "\n" for x in lines).encode() + b"not json\n"
    jobs.store.path("file-in").write_bytes(data)
    jobs.store.add_file("file-in", "in.jsonl", "batch", len(data))
    batch = jobs.create("file-in", "/v1/systemone", None)
    jobs.store.update(batch["id"], expect=("validating",), expires_at=int(time.time()) - 1)
    asyncio.run(Worker(jobs, app=None).step())
    ended = jobs.store.batch(batch["id"])
    assert ended["status"] == "expired" and ended["expired_at"] and ended["output_file_id"] is None
    assert ended["request_counts"] == {"total": 4, "completed": 0, "failed": 4}
    told = [json.loads(x) for x in jobs.store.path(ended["error_file_id"]).read_text().splitlines()]
    assert [x["custom_id"] for x in told] == ["e0", "e1", "e2", None]
    assert [x["error"]["code"] for x in told] == ["batch_expired"] * 3 + ["invalid_json_line"]


def test_the_key_is_required(batch_server):
    for method, path in (("GET", "/v1/files"), ("POST", "/v1/batches"), ("GET", "/v1/batches/x")):
        answer = httpx.request(method, batch_server.url + path)
        assert answer.status_code == 401 and answer.json()["error"]["code"] == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=batch_server.url + "/v1", api_key="wrong", max_retries=0).batches.list()


def test_without_a_key_configured_the_routes_say_why(server):
    for method, path in (("GET", "/v1/batches"), ("POST", "/v1/files"), ("GET", "/v1/files/file-x/content")):
        answer = httpx.request(method, server + path)
        error = answer.json()["error"]
        assert answer.status_code == 404 and error["code"] == "batch_api_off", answer.text
        assert "--api-key" in error["message"] and "--data-dir" in error["message"]
        assert "every other" in error["message"]


def test_figures_in_healthz_and_metrics(batch_server):
    health = httpx.get(batch_server.url + "/healthz").json()
    figures = health["batch_api"]
    assert figures["ok"] and figures["bytes_used"] > 0 and "rows_queued" in figures
    assert str(batch_server.data_dir) not in json.dumps(health) and "data_dir" not in json.dumps(health)
    text = httpx.get(batch_server.url + "/metrics", headers={"Authorization": f"Bearer {KEY}"}).text
    assert 'blink_batch_rows_total{outcome="completed"}' in text and "blink_batch_rows_queued" in text


def test_batch_rows_run_in_calls_of_their_own_after_interactive_decisions(client, batch_server):
    """While a batch runs, interactive decisions are answered as they are when it does not, each waiting at most for
    the bulk call already running (server-timing's `queue` against the longest bulk call /healthz saw; one second
    of slack for a busy machine's thread hand-offs), and every batch row went through the bulk lane, several rows to
    a call (blink.decide.batching's own tests hold the lane's rules call by call)."""
    headers = {"Authorization": f"Bearer {KEY}"}
    request = {"model": "demo", "state": "Where is my parcel? It was due on Monday.", "questions": QUESTIONS}
    url = batch_server.url + "/v1/systemone"
    alone = httpx.post(url, json=request, headers=headers, timeout=60).json()
    before = httpx.get(batch_server.url + "/healthz").json()["batching"]["bulk"]
    rows = [line(f"n{i}", "/v1/systemone", body) for i, body in enumerate(CASES["/v1/systemone"] * 8)]
    batch = client.batches.create(input_file_id=upload(client, rows).id, endpoint="/v1/systemone",
                                  completion_window="24h")  # fmt: skip
    waits = []
    while client.batches.retrieve(batch.id).status in ("validating", "in_progress") or not waits:
        answer = httpx.post(url, json=request, headers=headers, timeout=60)
        assert answer.status_code == 200, answer.text
        close(answer.json()["answers"], alone["answers"])
        timing = dict(part.split(";dur=") for part in answer.headers["server-timing"].split(", "))
        waits.append(float(timing["queue"]) / 1000)
    assert finished(client, batch.id).request_counts.completed == len(rows)
    after = httpx.get(batch_server.url + "/healthz").json()["batching"]["bulk"]
    assert after["rows"] - before["rows"] == len(rows)  # every row in the bulk lane, no interactive one
    assert after["calls"] - before["calls"] < len(rows)  # rows shared calls
    assert max(waits) <= after["longest_call_s"] + 1.0, (waits, after)


def test_a_server_killed_mid_batch_finishes_every_line_once(client, batch_server):
    n = 120
    bodies = [{"model": "demo", "state": text, "questions": QUESTIONS} for text in tickets(n, "K")]
    source = upload(client, [line(f"k{i}", "/v1/systemone", b) for i, b in enumerate(bodies)])
    batch = client.batches.create(input_file_id=source.id, endpoint="/v1/systemone", completion_window="24h")
    deadline = time.time() + 120
    while (now := client.batches.retrieve(batch.id)).request_counts.completed < 2 * CHUNK:
        assert now.status in ("validating", "in_progress") and time.time() < deadline, now
        time.sleep(0.05)
    assert now.status == "in_progress" and now.request_counts.completed < n, now
    batch_server.kill()
    batch_server.start()
    batch = finished(client, batch.id)
    assert batch.status == "completed" and batch.request_counts.completed == n, batch
    ids = [o["custom_id"] for o in read(client, batch.output_file_id)]
    assert ids == [f"k{i}" for i in range(n)]  # each once, in input order


def test_a_row_with_no_room_in_batch_retry_s_is_an_error_naming_the_knob(engine, demo_dir, tmp_path):
    """The in-process client's overall deadline: while the server has no room (its one decide place held) every row
    is answered 529 with Retry-After; past `batch_retry_s` seconds in all the row is the route's last refusal, its
    message saying so and naming the knob. Run-batch's client alone, then the Batch API's worker driven by the openai
    SDK, both on the real app in this process; with room again, the same row is answered."""
    import asyncio
    import dataclasses

    from starlette.testclient import TestClient

    from blink.batch.inproc import InProcess
    from blink.batch.jobs import BatchSettings, Jobs
    from blink.server import ServedModel, build_chat_engine, build_context, create_app
    from blink.settings import Settings
    from blink.web.admission import Admission, Policy

    retry_s = 0.3
    settings = Settings(model=str(demo_dir), api_key=KEY, data_dir=str(tmp_path), batch_retry_s=retry_s)
    served = ServedModel(engine.loaded, engine, build_chat_engine(settings, engine.loaded))
    ctx = build_context(settings, served, warmup=False)
    ctx = dataclasses.replace(ctx, admission=Admission({"decide": Policy(1), "chat": Policy(1)}))
    jobs = Jobs(BatchSettings.of(settings))
    app = create_app(ctx, metrics=False, jobs=jobs)
    row = CASES["/v1/systemone"][0]
    inproc = InProcess(app, headers={"Authorization": f"Bearer {KEY}"}, bulk=True, retry_s=retry_s)
    said = ("no room for this row in 0.3 s of retries", "batch_retry_s", "--batch-retry-s", "BLINK_BATCH_RETRY_S")

    with TestClient(app) as http:
        client = openai.OpenAI(base_url="http://testserver/v1", api_key=KEY, http_client=http, max_retries=0)
        with ctx.admission.gate("decide").enter_sync():  # the only place, held: no room for anyone else
            started = time.monotonic()
            answered = asyncio.run(inproc.post("/v1/systemone", json.dumps(row).encode()))
            took = time.monotonic() - started
            assert answered.status == 529 and answered.retries >= 1 and retry_s <= took < retry_s + 5
            assert all(part in answered.body["error"] for part in said), answered.body
            assert answered.body["detail"]["error_type"] == "overloaded_error"  # System One's shape, kept

            source = upload(client, [line(f"r{i}", "/v1/systemone", row) for i in range(3)])
            batch = client.batches.create(input_file_id=source.id, endpoint="/v1/systemone", completion_window="24h")
            batch = finished(client, batch.id, timeout=60)
        assert batch.status == "completed" and batch.request_counts.failed == 3, batch
        for out in read(client, batch.error_file_id):
            assert out["response"]["status_code"] == 529
            assert all(part in out["response"]["body"]["error"] for part in said), out
        assert asyncio.run(inproc.post("/v1/systemone", json.dumps(row).encode())).status == 200
