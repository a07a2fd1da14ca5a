"""The Batch API's job store: one SQLite database (the standard library's) beside the files it names, under
`--data-dir`.

Three tables: `files` (uploads and the outputs a batch writes), `batches` (OpenAI's batch object, one column per
field) and `lines` (each finished output line of a running batch, by its input line's index). A batch's lines are
recorded a chunk at a time in one transaction, so after a crash (SIGKILL, a lost machine) a line is either recorded
with its whole chunk or not at all; the worker decides the rest, and `(batch_id, idx)` being the key means no line
is ever written twice. When the batch finishes its lines become the output and error files and leave the table.

Every call opens its own short transaction; the worker calls it from a thread (`asyncio.to_thread`) and the routes
too, so the event loop never waits on the disk.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sqlite3
import threading
import time
from pathlib import Path

import orjson

from blink.errors import NoRoute

SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL, filename TEXT NOT NULL, purpose TEXT NOT NULL,
    bytes INTEGER NOT NULL, created_at INTEGER NOT NULL, expires_at INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS batches (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL, body TEXT NOT NULL, status TEXT NOT NULL,
    forget_at INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS lines (
    batch_id TEXT NOT NULL, idx INTEGER NOT NULL, ok INTEGER NOT NULL, line BLOB NOT NULL,
    PRIMARY KEY (batch_id, idx));
"""


def not_found(what: str, item_id: str, loc: tuple) -> NoRoute:
    """The one answer for a file or a batch that is not here (never was, deleted, or past its retention), wherever
    it is named (a path, `input_file_id`, a page's `after`): 404 in OpenAI's shape (`invalid_request_error`, code
    `not_found`, `param` the field that named it), so the openai SDK raises `NotFoundError`."""
    return NoRoute(f"no {what} {item_id!r} here (or it expired)", loc=list(loc), kind="not_found")


# the statuses a batch is worked on in; the others are where it ends
ACTIVE = ("validating", "in_progress", "finalizing", "cancelling")


def new_id(prefix: str) -> str:
    return prefix + secrets.token_hex(12)


class Store:
    def __init__(self, root: str, retention_s: float, quota_bytes: int):
        self.root = Path(root)
        self.files_dir = self.root / "files"
        self.files_dir.mkdir(parents=True, exist_ok=True)
        self.retention_s, self.quota_bytes = retention_s, quota_bytes
        self._lock = threading.Lock()  # one writer at a time in this process; SQLite's own lock between processes
        self._db = sqlite3.connect(self.root / "batches.sqlite3", check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")  # a committed chunk survives a power cut, not only a crash
        self._db.executescript(SCHEMA)
        self.reserved = 0  # bytes of uploads being received now, counted against the quota

    @contextlib.contextmanager
    def _tx(self):
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _rows(self, sql: str, args=()) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    # --- files ------------------------------------------------------------------------------------------------

    def path(self, file_id: str) -> Path:
        return self.files_dir / file_id

    def used_bytes(self) -> int:
        return self._rows("SELECT COALESCE(SUM(bytes), 0) FROM files")[0][0] + self.reserved

    def add_file(self, file_id: str, filename: str, purpose: str, size: int) -> dict:
        now = int(time.time())
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO files (id, filename, purpose, bytes, created_at, expires_at) "
                "VALUES (?,?,?,?,?,?)",
                (file_id, filename, purpose, size, now, now + int(self.retention_s)),
            )
        return self.file(file_id)

    def file(self, file_id: str) -> dict | None:
        rows = self._rows(
            "SELECT id, filename, purpose, bytes, created_at, expires_at FROM files WHERE id=?", (file_id,)
        )
        return file_object(rows[0]) if rows else None

    def files(self, purpose: str | None, after: str | None, limit: int, newest_first: bool) -> tuple[list, bool]:
        """One page of files, and whether more follow."""
        where, args = [], []
        if purpose:
            where.append("purpose=?")
            args.append(purpose)
        if after:
            where.append("seq<?" if newest_first else "seq>?")
            args.append(self._after("files", after))
        sql = "SELECT id, filename, purpose, bytes, created_at, expires_at FROM files"
        sql += (" WHERE " + " AND ".join(where) if where else "") + f" ORDER BY seq {'DESC' if newest_first else ''}"
        rows = self._rows(sql + " LIMIT ?", (*args, limit + 1))
        return [file_object(r) for r in rows[:limit]], len(rows) > limit

    def delete_file(self, file_id: str) -> bool:
        with self._tx() as db:
            gone = db.execute("DELETE FROM files WHERE id=?", (file_id,)).rowcount > 0
        self.path(file_id).unlink(missing_ok=True)
        return gone

    def _after(self, table: str, item_id: str) -> int:
        """Where a page after `item_id` starts; an id not here is the 404 of any id not here (a page never starts
        over silently)."""
        rows = self._rows(f"SELECT seq FROM {table} WHERE id=?", (item_id,))  # noqa: S608 - our own table names
        if not rows:
            raise not_found({"files": "file", "batches": "batch"}[table], item_id, ("query", "after"))
        return rows[0][0]

    # --- batches ----------------------------------------------------------------------------------------------

    def add_batch(self, batch: dict) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO batches (id, body, status, forget_at) VALUES (?,?,?,?)",
                (batch["id"], orjson.dumps(batch).decode(), batch["status"], batch["created_at"] + self.retention_s),
            )

    def batch(self, batch_id: str) -> dict | None:
        rows = self._rows("SELECT body FROM batches WHERE id=?", (batch_id,))
        return orjson.loads(rows[0][0]) if rows else None

    def batches(self, after: str | None, limit: int) -> tuple[list, bool]:
        """One page of batches, newest first (OpenAI's order), and whether more follow."""
        seq = self._after("batches", after) if after else None
        if seq is not None:
            rows = self._rows("SELECT body FROM batches WHERE seq<? ORDER BY seq DESC LIMIT ?", (seq, limit + 1))
        else:
            rows = self._rows("SELECT body FROM batches ORDER BY seq DESC LIMIT ?", (limit + 1,))
        return [orjson.loads(r[0]) for r in rows[:limit]], len(rows) > limit

    def active(self) -> list[dict]:
        """The batches still to be worked on, oldest first."""
        marks = ",".join("?" * len(ACTIVE))
        rows = self._rows(f"SELECT body FROM batches WHERE status IN ({marks}) ORDER BY seq", ACTIVE)  # noqa: S608
        return [orjson.loads(r[0]) for r in rows]

    def update(self, batch_id: str, expect: tuple[str, ...] | None = None, **fields) -> dict | None:
        """The batch with `fields` set, in one transaction; None (nothing changed) when its status is not in
        `expect`. The only way a batch changes: a cancel and the worker never overwrite each other's status."""
        with self._tx() as db:
            rows = db.execute("SELECT body FROM batches WHERE id=?", (batch_id,)).fetchall()
            if not rows:
                return None
            batch = orjson.loads(rows[0][0])
            if expect is not None and batch["status"] not in expect:
                return None
            batch.update(fields)
            db.execute(
                "UPDATE batches SET body=?, status=? WHERE id=?",
                (orjson.dumps(batch).decode(), batch["status"], batch_id),
            )
        return batch

    # --- a running batch's lines ------------------------------------------------------------------------------

    def record(self, batch_id: str, lines: list[tuple[int, bool, bytes]]) -> dict:
        """A chunk's output lines `(idx, ok, line)` and the batch's counts, in one transaction."""
        with self._tx() as db:
            db.executemany(
                "INSERT OR IGNORE INTO lines (batch_id, idx, ok, line) VALUES (?,?,?,?)",
                [(batch_id, idx, int(ok), line) for idx, ok, line in lines],
            )
            done, ok = db.execute(
                "SELECT COUNT(*), COALESCE(SUM(ok), 0) FROM lines WHERE batch_id=?", (batch_id,)
            ).fetchone()
            body = orjson.loads(db.execute("SELECT body FROM batches WHERE id=?", (batch_id,)).fetchone()[0])
            body["request_counts"] = {**body["request_counts"], "completed": ok, "failed": done - ok}
            db.execute("UPDATE batches SET body=? WHERE id=?", (orjson.dumps(body).decode(), batch_id))
        return body

    def done_indexes(self, batch_id: str) -> set[int]:
        return {r[0] for r in self._rows("SELECT idx FROM lines WHERE batch_id=?", (batch_id,))}

    def write_lines(self, batch_id: str, ok: bool, file_id: str) -> int:
        """The batch's recorded lines of one kind, in input order, into the file `file_id` (renamed into place
        whole); how many bytes it holds."""
        final = self.path(file_id)
        tmp = final.with_name(final.name + ".tmp")
        with self._lock:
            cursor = self._db.execute("SELECT line FROM lines WHERE batch_id=? AND ok=? ORDER BY idx", (batch_id, ok))
            with open(tmp, "wb") as out:
                for (line,) in cursor:
                    out.write(line + b"\n")
                out.flush()
                os.fsync(out.fileno())
        os.replace(tmp, final)
        return final.stat().st_size

    def drop_lines(self, batch_id: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM lines WHERE batch_id=?", (batch_id,))

    # --- retention --------------------------------------------------------------------------------------------

    def forget_expired(self, now: float) -> None:
        """Files past their `expires_at` and batches past the retention are deleted (the files from disk too)."""
        expired = [r[0] for r in self._rows("SELECT id FROM files WHERE expires_at<=?", (now,))]
        for file_id in expired:
            self.delete_file(file_id)
        with self._tx() as db:
            old = [r[0] for r in db.execute("SELECT id FROM batches WHERE forget_at<=?", (now,)).fetchall()]
            db.executemany("DELETE FROM lines WHERE batch_id=?", [(b,) for b in old])
            db.execute("DELETE FROM batches WHERE forget_at<=?", (now,))

    def counts(self) -> dict:
        """Rows done and queued over the active batches, and the store's size (for /healthz and /metrics)."""
        active = self.active()
        total = sum(b["request_counts"]["total"] for b in active)
        done = sum(b["request_counts"]["completed"] + b["request_counts"]["failed"] for b in active)
        return {"batches_active": len(active), "rows_queued": total - done, "bytes_used": self.used_bytes()}


def file_object(row: tuple) -> dict:
    file_id, filename, purpose, size, created_at, expires_at = row
    return {
        "id": file_id,
        "object": "file",
        "bytes": size,
        "created_at": created_at,
        "expires_at": expires_at,
        "filename": filename,
        "purpose": purpose,
        "status": "processed",
        "status_details": None,
    }
