"""The Batch API's worker: one task in the serving process that takes each batch from `validating` to its end,
one batch at a time, oldest first.

- `validating`: the whole input file is read before any line runs: a line whose `url` is not the batch's `endpoint`
  fails the batch, as OpenAI requires, with OpenAI's `errors` object (one entry per such line), and so does an empty
  file; any other bad line (not JSON or not UTF-8, no `custom_id`, one seen before, a body too large, ...) is its
  own line in the error file, as in run-batch, and never stops the others.
- `in_progress`: the lines not yet recorded, `chunk_rows` at a time, sent to the app's own routes in this process
  (blink.batch.inproc, as run-batch sends them) as their own caller, `batch-api`, and as bulk work: admission
  shares its places fairly between that caller and the interactive ones (a batch holds at most a chunk's places),
  and the batcher decides bulk rows in model calls of their own, sized to `batch_call_s` seconds, after every
  interactive request waiting: an interactive decision waits at most for the bulk call already running. Each
  chunk's lines are recorded in one transaction (blink.batch.store); a server killed mid-batch and started again on
  the same data dir decides only the lines not recorded, so each line is in the output exactly once. A cancel is
  seen between chunks, and by a row waiting for room (it stops waiting, unanswered).
- `finalizing` / `cancelling` / past `expires_at`: the recorded lines become the output file (2xx answers) and the
  error file (the rest), and the batch ends `completed`, `cancelled` or `expired`; a cancelled or expired batch's
  lines not run are each an error line (OpenAI's `batch_cancelled`, `batch_expired`): every input line has one
  output line.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import time

import orjson

from blink.batch.inproc import GaveUp, InProcess
from blink.batch.requests_file import RequestsFile, output_line
from blink.web import metrics

log = logging.getLogger("blink")
CALLER = "batch-api"  # the peer address admission sees for every batch row: one caller, one fair share
IDLE_S = 1.0  # between looks at the store when nothing wakes the worker (expiry, retention)
NOT_RUN_LINES = 1000  # recorded per transaction when a batch ends with lines not run
MAX_ERRORS = 1000  # entries of a failed batch's `errors` (the count says how many lines were bad in all)
ENDS = {"finalizing": ("completed", "completed_at"), "cancelling": ("cancelled", "cancelled_at")}
# a cancelled or expired batch's lines not run: OpenAI's error codes for them
NOT_RUN = {
    "cancelled": ("batch_cancelled", "the batch was cancelled before this request ran"),
    "expired": ("batch_expired", "this request could not run before the batch's completion window ended"),
}


def output_id(batch_id: str, kind: str) -> str:
    """A batch's output or error file id, the same on every try: a finalizing cut short writes the same file again."""
    return "file-" + hashlib.sha256(f"{batch_id}:{kind}".encode()).hexdigest()[:24]


class Worker:
    def __init__(self, jobs, app):
        self.jobs, self.store, self.settings = jobs, jobs.store, jobs.settings
        headers = {"authorization": f"Bearer {self.settings.api_key}"}
        self.client = InProcess(app, caller=CALLER, headers=headers, bulk=True, retry_s=self.settings.retry_s)
        self.current: dict = {}  # the running batch's id, rows done since it started here, and when it started
        self.counts: dict = {}  # the store's counts as last read (/healthz reads no database on the event loop)

    async def run(self) -> None:
        while True:
            self.jobs.wake.clear()  # before the look: what wakes it during the look is seen at once after
            try:
                await self.step()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - logged; the next look tries again, the server keeps serving
                log.exception("batch worker: a step failed")
            try:
                await asyncio.wait_for(self.jobs.wake.wait(), IDLE_S)
            except TimeoutError:
                pass

    async def step(self) -> None:
        await asyncio.to_thread(self.store.forget_expired, time.time())
        for batch in await asyncio.to_thread(self.store.active):
            await self.work(batch)
        await asyncio.to_thread(self._gauges)

    async def work(self, batch: dict) -> None:
        status = batch["status"]
        if status in ("validating", "in_progress") and not self.store.path(batch["input_file_id"]).is_file():
            await asyncio.to_thread(self.lost_input, batch)
        elif status in ("validating", "in_progress") and time.time() >= batch["expires_at"]:
            await asyncio.to_thread(self.finish, batch["id"], ("expired", "expired_at"), (status,))
        elif status == "validating":
            await asyncio.to_thread(self.validate, batch)
        elif status == "in_progress":
            await self.run_batch(batch)
        else:
            await asyncio.to_thread(self.finish, batch["id"], ENDS[status], (status,))

    # --- validating ---------------------------------------------------------------------------------------------

    def validate(self, batch: dict) -> None:
        """A line for another route than the batch's endpoint fails the batch, as OpenAI's rule has it (the file is
        not the batch its caller meant); any other bad line is its own line in the error file, the rest still run."""
        errors, total = [], 0
        for row in self._rows(batch):
            total += 1
            fault = row.error if row.error is not None and row.error["code"] == "invalid_url" else None
            if row.error is None and row.path != batch["endpoint"]:
                fault = {
                    "code": "invalid_url",
                    "message": f"line {row.index + 1}: `url` {row.path!r} is not the batch's endpoint "
                    f"{batch['endpoint']!r} (every line's url must equal it)",
                }
            if fault is not None:
                errors.append({**fault, "param": None, "line": row.index + 1})
        if total == 0:
            errors.append({"code": "empty_file", "message": "the input file has no lines", "param": None, "line": None})
        now = int(time.time())
        if errors:
            shown = errors[:MAX_ERRORS]
            if len(errors) > len(shown):
                shown[-1]["message"] += f" ({len(errors)} bad lines in all; the first {MAX_ERRORS} are listed)"
            update = {"status": "failed", "failed_at": now, "errors": {"object": "list", "data": shown}}
        else:
            counts = {"total": total, "completed": 0, "failed": 0}
            update = {"status": "in_progress", "in_progress_at": now, "request_counts": counts}
        self.store.update(batch["id"], expect=("validating",), **update)
        self.jobs.notify()

    def lost_input(self, batch: dict) -> None:
        """The input file expired (a retention shorter than the batch): the batch fails, saying so."""
        message = f"the input file {batch['input_file_id']} expired before the batch ended (retention_hours)"
        error = {"code": "input_file_expired", "message": message, "param": None, "line": None}
        fields = {"status": "failed", "failed_at": int(time.time()), "errors": {"object": "list", "data": [error]}}
        self.store.update(batch["id"], expect=(batch["status"],), **fields)
        self.store.drop_lines(batch["id"])

    def _rows(self, batch: dict):
        return RequestsFile(str(self.store.path(batch["input_file_id"])), self.settings.max_body_bytes).rows()

    # --- in_progress ----------------------------------------------------------------------------------------------

    async def run_batch(self, batch: dict) -> None:
        batch_id = batch["id"]
        done = await asyncio.to_thread(self.store.done_indexes, batch_id)
        rows = (row for row in self._rows(batch) if row.index not in done)
        self.current = {"id": batch_id, "rows": 0, "since": time.monotonic()}
        while True:
            chunk = await asyncio.to_thread(lambda: list(itertools.islice(rows, self.settings.chunk_rows)))
            if not chunk:
                break
            now = await asyncio.to_thread(self.store.batch, batch_id)
            if now is None or now["status"] != "in_progress" or time.time() >= now["expires_at"]:
                return  # cancelled (or expired) between chunks: the next step ends it
            if not await self.run_chunk(batch_id, chunk, now["expires_at"]):
                return  # rows stopped waiting for room: cancelled or expired, which the next step ends
        now = int(time.time())
        await asyncio.to_thread(
            self.store.update, batch_id, expect=("in_progress",), status="finalizing", finalizing_at=now
        )
        self.current = {}
        self.jobs.notify()

    async def run_chunk(self, batch_id: str, chunk: list, expires_at: float) -> bool:
        """The chunk's answers recorded; False when rows stopped waiting for room (cancelled, expired): those are
        not recorded, and are run again or reported as not run."""

        def give_up() -> bool:
            return batch_id in self.jobs.cancelled or time.time() >= expires_at

        answers = await asyncio.gather(*(self._answer(row, give_up) for row in chunk), return_exceptions=True)
        for answered in answers:
            if isinstance(answered, BaseException) and not isinstance(answered, GaveUp):
                raise answered
        lines = []
        for row, answered in zip(chunk, answers):
            if isinstance(answered, GaveUp):
                continue
            ok = answered is not None and 200 <= answered.status < 300
            lines.append((row.index, ok, orjson.dumps(output_line(row, answered))))
            metrics.BATCH_ROWS.labels("completed" if ok else "failed").inc()
        await asyncio.to_thread(self.store.record, batch_id, lines)
        self.current["rows"] = self.current.get("rows", 0) + len(lines)
        await asyncio.to_thread(self._gauges)
        return len(lines) == len(chunk)

    async def _answer(self, row, give_up):
        if row.path is None:
            return None  # refused before any route: the line's own error (not JSON, no custom_id, ...)
        return await self.client.post(row.path, row.body, give_up)

    # --- the end --------------------------------------------------------------------------------------------------

    def finish(self, batch_id: str, end: tuple[str, str], expect: tuple[str, ...]) -> None:
        """The recorded lines into the output and error files, then the batch's end status."""
        status, stamp = end
        if status in NOT_RUN:
            self.record_not_run(batch_id, *NOT_RUN[status])
        self.jobs.cancelled.discard(batch_id)  # ended: no row of it waits for room any more
        files = {}
        for kind, ok in (("output", True), ("error", False)):
            file_id = output_id(batch_id, kind)
            size = self.store.write_lines(batch_id, ok, file_id)
            if size:
                self.store.add_file(file_id, f"{batch_id}_{kind}.jsonl", "batch_output", size)
                files[f"{kind}_file_id"] = file_id
            else:
                self.store.path(file_id).unlink(missing_ok=True)
        self.store.update(batch_id, expect=expect, status=status, **{stamp: int(time.time())}, **files)
        self.store.drop_lines(batch_id)

    def record_not_run(self, batch_id: str, code: str, message: str) -> None:
        """Each line not run gets its error line: OpenAI's `code`, or a line's own refusal where it had one."""
        batch = self.store.batch(batch_id)
        if batch is None or not self.store.path(batch["input_file_id"]).is_file():
            return
        done, lines, total = self.store.done_indexes(batch_id), [], 0
        for row in self._rows(batch):
            total += 1
            if row.index in done:
                continue
            line = output_line(row, None)
            if row.error is None:
                line["error"] = {"code": code, "message": message}
            lines.append((row.index, False, orjson.dumps(line)))
            if len(lines) >= NOT_RUN_LINES:
                self.store.record(batch_id, lines)
                lines = []
        counts = self.store.record(batch_id, lines)["request_counts"]
        if counts["total"] != total:  # it expired while validating: the lines were never counted
            self.store.update(batch_id, request_counts={**counts, "total": total})

    def _gauges(self) -> None:
        counts = self.counts = self.store.counts()
        metrics.BATCH_QUEUED.set(counts["rows_queued"])
        metrics.BATCH_ACTIVE.set(counts["batches_active"])

    def figures(self) -> dict:
        """The worker's own figures for /healthz: the running batch and its rows per second here."""
        out = {"running": self.current.get("id"), **self.counts}
        if self.current:
            elapsed = time.monotonic() - self.current["since"]
            out["rows_per_s"] = round(self.current["rows"] / elapsed, 2) if elapsed > 0 else 0.0
        return out
