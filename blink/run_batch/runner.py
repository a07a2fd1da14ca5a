"""The run: rows sent to the routes in this process as many at once as admission has room for one caller, so the
batcher puts many decisions in each model call; each chunk written as its last row is answered; the parts joined
at the end.

Rows are read as they are sent (a slow model holds the reader back: nothing reads the whole input first). A stop
(SIGTERM, Ctrl-C) lets the chunks already started finish and be written, starts no other, and leaves the run to be
resumed; a second one ends the process at once (what is written stays written).
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import orjson

from blink.batch.inproc import Answered, InProcess
from blink.batch.requests_file import GENERATING, Row
from blink.run_batch.journal import Journal, write_atomically
from blink.run_batch.progress import Progress


def tokens_of(answered: Answered) -> int:
    usage = answered.body.get("usage") if isinstance(answered.body, dict) else None
    if not isinstance(usage, dict):
        return 0
    value = usage.get("input_tokens", usage.get("prompt_tokens", usage.get("total_tokens", 0)))
    return value if isinstance(value, int) else 0


class Runner:
    def __init__(self, client: InProcess, journal: Journal, parts, progress: Progress, room: int, generating: int):
        self.client, self.journal, self.parts, self.progress = client, journal, parts, progress
        self.room = asyncio.Semaphore(room)  # rows in flight: what admission holds for one caller
        self.generating = asyncio.Semaphore(generating)  # of which generating: the chat slots
        self.stop = asyncio.Event()
        self.writing: set[asyncio.Task] = set()

    async def run(self, chunks: Iterator[tuple[int, list[Row], object]]) -> bool:
        """Every chunk not yet written; True when it stopped early (a signal)."""
        self._on_signals()
        for k, rows, arrow in chunks:
            if self.stop.is_set():
                break
            if self.journal.done(k, self.parts.ext):
                self.progress.skip(len(rows), self._stats(k).get("errors", 0))
                continue
            answered: list = [None] * len(rows)
            sent = []
            for i, row in enumerate(rows):
                if row.path is None:  # refused before it was sent: done
                    self.progress.answered(0)
                    continue
                await self.room.acquire()
                sent.append(asyncio.create_task(self._one(row, i, answered)))
            task = asyncio.create_task(self._finish(k, rows, answered, sent, arrow))
            self.writing.add(task)
            task.add_done_callback(self.writing.discard)
        while self.writing:
            await asyncio.gather(*list(self.writing))
        return self.stop.is_set()

    async def _one(self, row: Row, i: int, answered: list) -> None:
        try:
            if row.path in GENERATING:
                async with self.generating:
                    answered[i] = await self.client.post(row.path, row.body)
            else:
                answered[i] = await self.client.post(row.path, row.body)
        finally:
            self.room.release()
        self.progress.answered(tokens_of(answered[i]))

    async def _finish(self, k: int, rows: list[Row], answered: list, sent: list, arrow) -> None:
        await asyncio.gather(*sent)
        self.progress.written(await asyncio.to_thread(self._write, k, rows, answered, arrow))

    def _write(self, k: int, rows: list[Row], answered: list, arrow) -> int:
        """The chunk's part, whole or not at all: written under a temporary name, then renamed into place."""
        final = self.journal.part(k, self.parts.ext)
        tmp = final.with_name(final.name + ".tmp")
        errors = self.parts.write(tmp, rows, answered, arrow)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        write_atomically(self._stats_path(k), orjson.dumps({"rows": len(rows), "errors": errors}))
        os.replace(tmp, final)
        return errors

    def _stats_path(self, k: int) -> Path:
        return self.journal.part(k, "stats.json")

    def _stats(self, k: int) -> dict:
        try:
            return orjson.loads(self._stats_path(k).read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return {}

    def _on_signals(self) -> None:
        loop = asyncio.get_running_loop()

        def stop():
            if self.stop.is_set():
                os._exit(130)  # the second signal: at once (every part written so far is whole)
            self.stop.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop)


def join(journal: Journal, parts, chunks: int) -> None:
    """The parts, in order, into the output (under a temporary name, then renamed)."""
    paths = [journal.part(k, parts.ext) for k in range(chunks)]
    tmp = journal.output.with_name(journal.output.name + ".tmp")
    with open(tmp, "wb") as out:
        if paths:
            parts.join(paths, out)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, journal.output)
