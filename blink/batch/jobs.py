"""The Batch API's jobs (`/v1/files`, `/v1/batches` on `serve`): what its routes (blink.api.files,
blink.api.batches) ask of the store, and the worker that runs the batches (blink.batch.worker), started and stopped
with the app (`running`).

The routes speak HTTP and hold no state; everything here is plain calls on the SQLite store, each in a worker thread.
One API key is one tenant: every caller who holds the key sees every file and batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass

from blink.batch.inproc import RETRY_S
from blink.batch.requests_file import ROUTES
from blink.batch.store import Store, new_id, not_found
from blink.errors import BlinkError, InvalidRequest

COMPLETION_WINDOW_S = 24 * 3600  # "24h", the only window OpenAI offers
# the fields OpenAI's batch object carries, empty until the batch reaches them
TIMESTAMPS = ("in_progress_at", "finalizing_at", "completed_at", "failed_at", "expired_at", "cancelling_at")


@dataclass(frozen=True)
class BatchSettings:
    data_dir: str
    api_key: str
    max_upload_bytes: int
    quota_bytes: int
    retention_s: float
    chunk_rows: int
    max_body_bytes: int
    retry_s: float = RETRY_S  # how long a row waits in all for room (`batch_retry_s`)

    @classmethod
    def of(cls, settings) -> BatchSettings | None:
        """From the server's settings; None when the Batch API is off (no data dir, or no key)."""
        if not (settings.data_dir and settings.api_key):
            return None
        return cls(
            settings.data_dir,
            settings.api_key,
            settings.max_upload_bytes,
            settings.data_quota_bytes,
            settings.retention_hours * 3600,
            settings.batch_chunk_rows,
            settings.max_body_bytes,
            settings.batch_retry_s,
        )


class Conflict(BlinkError):
    status = 409
    error_type = "invalid_request_error"


class Jobs:
    def __init__(self, settings: BatchSettings):
        self.settings = settings
        self.store = Store(settings.data_dir, settings.retention_s, settings.quota_bytes)
        self.wake = asyncio.Event()  # a batch to work on: the worker starts at once rather than at its next look
        self.worker = self.task = None
        self.cancelled: set[str] = set()  # batches cancelled while running here (the store says so after a restart)
        self.loop: asyncio.AbstractEventLoop | None = None

    def notify(self) -> None:
        """Wake the worker, from any thread (the routes call in worker threads)."""
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.wake.set)

    # --- files ------------------------------------------------------------------------------------------------

    def file(self, file_id: str) -> dict:
        found = self.store.file(file_id)
        if found is None:
            raise not_found("file", file_id, ("path", "file_id"))
        return found

    def delete_file(self, file_id: str) -> dict:
        self.file(file_id)
        users = [b["id"] for b in self.store.active() if b["input_file_id"] == file_id]
        if users:
            message = f"file {file_id!r} is the input of batch {users[0]}, not ended yet: cancel it first"
            raise Conflict(message, loc=["path", "file_id"], kind="file_in_use")
        self.store.delete_file(file_id)
        return {"id": file_id, "object": "file", "deleted": True}

    # --- batches ----------------------------------------------------------------------------------------------

    def create(self, input_file_id: str, endpoint: str, metadata: dict | None) -> dict:
        """A new batch, `validating`: the worker reads its whole file before any line is run."""
        if endpoint not in ROUTES:
            raise InvalidRequest(
                f"`endpoint` {endpoint!r} is not one a batch runs; one of {', '.join(ROUTES)}",
                loc=["body", "endpoint"],
                kind="invalid_endpoint",
            )
        found = self.store.file(input_file_id)
        if found is None:
            raise not_found("file", input_file_id, ("body", "input_file_id"))
        if found["purpose"] != "batch":
            raise InvalidRequest(
                f"file {input_file_id!r} has purpose {found['purpose']!r}; a batch reads a file uploaded with "
                'purpose "batch"',
                loc=["body", "input_file_id"],
                kind="invalid_file",
            )
        now = int(time.time())
        batch = {
            "id": new_id("batch_"),
            "object": "batch",
            "endpoint": endpoint,
            "errors": None,
            "input_file_id": input_file_id,
            "completion_window": "24h",
            "status": "validating",
            "output_file_id": None,
            "error_file_id": None,
            "created_at": now,
            **dict.fromkeys(TIMESTAMPS),
            "cancelled_at": None,
            "expires_at": now + COMPLETION_WINDOW_S,
            "request_counts": {"total": 0, "completed": 0, "failed": 0},
            "metadata": metadata,
        }
        self.store.add_batch(batch)
        self.notify()
        return batch

    def batch(self, batch_id: str) -> dict:
        found = self.store.batch(batch_id)
        if found is None:
            raise not_found("batch", batch_id, ("path", "batch_id"))
        return found

    def cancel(self, batch_id: str) -> dict:
        """`cancelling` (the worker ends it after the chunk it is running: `cancelled`); a batch already ending or
        ended is answered as it is, one that finished otherwise is a 409."""
        batch = self.store.update(
            batch_id, expect=("validating", "in_progress"), status="cancelling", cancelling_at=int(time.time())
        )
        if batch is not None:
            self.cancelled.add(batch_id)  # rows waiting for room stop waiting
            self.notify()
            return batch
        batch = self.batch(batch_id)
        if batch["status"] in ("cancelling", "cancelled"):
            return batch
        raise Conflict(
            f"batch {batch_id} is {batch['status']}: only a validating or in_progress batch can be cancelled"
        )

    # --- the worker -------------------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def running(self, app):
        """The worker over `app`'s own routes, for as long as the app serves."""
        from blink.batch.worker import Worker

        self.worker, self.loop = Worker(self, app), asyncio.get_running_loop()
        self.task = asyncio.create_task(self.worker.run())
        try:
            yield
        finally:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    def health(self) -> dict:
        """/healthz's `batch_api`: the worker's figures, the store's counts as it last read them (the data dir is
        never shown)."""
        alive = self.task is not None and not self.task.done()
        worker = self.worker.figures() if self.worker is not None else {}
        return {"batch_api": {"ok": alive, **worker, "quota_bytes": self.settings.quota_bytes}}
