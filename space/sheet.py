"""The Sheet's run, without Gradio: a table (CSV, JSONL or Parquet) labelled row by row with the answers to the same
questions, read, named and written as `python -m blink run-batch --table` does (blink.batch.tables and .parts).

Before any work the upload is checked (empty, past the bytes or the rows a run takes, unreadable, no header, a
state column it lacks) and refused in words. Then the rows go in chunks: each chunk's rows are checked one by one
(a bad row is its own error, in the error column), then admitted together (a place each, in the caller's share)
and decided in one call of the decision service (`run_many`: one batch, one GPU call on the caller's own quota,
its seconds estimated as every call's). A chunk is as many rows as a rerank takes documents, which both admission
and the GPU call's duration cap are sized for. The downloads are rewritten after every chunk, so a run stopped (the
Stop button, a ZeroGPU quota that ran out) leaves the rows done downloadable.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from blink.api.systemone import response_body
from blink.batch.inproc import Answered
from blink.batch.parts import TableParts
from blink.batch.tables import Answers, Table, decision_rows, format_of
from blink.context import Context
from blink.errors import BlinkError, GPUUnavailable, InvalidRequest, Overloaded, QuotaExceeded, StartupError

OVERLOAD_TRIES = 30  # a chunk the server has no room for waits its Retry-After and goes again, this many times


class SheetRefused(Exception):
    """What is wrong with the upload or the form, in the page's words (nothing was run)."""


@dataclass(frozen=True)
class SheetLimits:
    max_rows: int
    max_bytes: int


def megabytes(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def open_table(path: str, limits: SheetLimits) -> Table:
    """The upload as blink.batch.tables reads it, refused in words when it cannot be a table to label."""
    name = os.path.basename(path)
    size = os.path.getsize(path)
    if size == 0:
        raise SheetRefused(f"{name} is empty: upload a table with a header line and at least one row.")
    if size > limits.max_bytes:
        raise SheetRefused(
            f"{name} is {megabytes(size)}; this Space takes tables of at most {megabytes(limits.max_bytes)}. "
            "Split it, or label it on your own machine with python -m blink run-batch."
        )
    try:
        table = Table(path, format_of(path), limits.max_bytes)
    except StartupError as error:
        if "say which format" in str(error):
            raise SheetRefused(f"{name}: upload a .csv, .jsonl or .parquet file.") from None
        said = str(error)
        if said.startswith(path + ": "):
            raise SheetRefused(f"{name} cannot be read: {said.removeprefix(path + ': ')}") from None
        raise SheetRefused(said.replace(path, name)) from None  # "x.csv is not a text table (…)"
    problem = header_problem(table.columns)
    if problem:
        raise SheetRefused(f"{name}: {problem}")
    return table


def header_problem(columns: list[str]) -> str | None:
    """Why the first line does not look like a header (column names), or None. pyarrow takes any first line as
    one, so a file without a header would have its first row's values as column names."""
    if not columns:
        return "no columns found: the first line should name the columns, e.g. id,text."
    for name in columns:
        looks_like_data = (
            not name.strip()
            or len(name) > 64
            or len(name.split()) > 5  # a sentence, not a name
            or re.fullmatch(r"[-+]?\d+(\.\d+)?", name.strip()) is not None
        )
        if looks_like_data:  # (two columns of one name: Table refuses it first, naming it)
            shown = name if len(name) <= 40 else name[:40] + "…"
            return (
                f"the first line does not look like a header (a column named {shown!r}). Add a first line naming "
                "the columns, e.g. id,text, and upload it again."
            )
    return None


def count_rows(table: Table, limits: SheetLimits) -> int:
    """The table's rows, refused when there are none or more than a run takes (read in chunks, nothing kept)."""
    try:
        total = 0
        for rows, _ in table.chunks(1024):
            total += len(rows)
            if total > limits.max_rows:
                raise SheetRefused(
                    f"The table has more than {limits.max_rows:,} rows; this Space labels at most {limits.max_rows:,} "
                    "in one run. Split it into smaller files, or label it with python -m blink run-batch."
                )
    except StartupError as error:
        reason = str(error).removeprefix(f"{table.path}: ")  # the server's own path is no news to the person
        raise SheetRefused(f"The table cannot be read past its start ({reason}).") from None
    if total == 0:
        raise SheetRefused("The table has a header but no rows: add the rows to label.")
    return total


def state_columns_problem(table: Table, columns: list[str]) -> str | None:
    if not columns:
        return f"Pick the column (or columns) the questions are about: {', '.join(table.columns)}."
    missing = [c for c in columns if c not in table.columns]
    if missing:
        return f"The table has no column {missing[0]!r}; its columns are {', '.join(table.columns)}."
    return None


def answers_for(ctx: Context, questions: dict, columns: list[str]) -> Answers:
    """The answer columns for these questions, or the questions' problem in words (the wire's check)."""
    try:
        checked = ctx.planner.check({"state": "-", "questions": questions})
    except InvalidRequest as error:
        raise SheetRefused(f"The questions: {error.message.replace('`', '')}") from None
    try:
        return Answers(checked.decision.questions, columns)
    except StartupError as error:
        raise SheetRefused(str(error)) from None


def failed(error: BlinkError) -> Answered:
    return Answered(error.status, {"error": {"message": error.message.replace("`", "")}}, None)


async def decide_chunk(ctx: Context, rows: list, caller, caller_class: str) -> list:
    """The chunk's answers (an `Answered` per row; None for a row refused before: `row.error`). Each row is checked on
    its own; the rest are admitted and decided together, one batch; a row whose plan is refused (too long) gets its
    error and the others go again without it. A refusal of the whole chunk (quota, no GPU) is raised."""
    answered: list = [None] * len(rows)
    bodies: dict[int, dict] = {}
    for i, row in enumerate(rows):
        if row.error is None:
            body = orjson.loads(row.body)
            try:
                ctx.service.check(body)
                bodies[i] = body
            except BlinkError as error:
                answered[i] = failed(error)
    tries = 0
    while bodies:
        order, refused = list(bodies), {}

        def at(k: int, error: BlinkError, order=order, refused=refused) -> BlinkError:
            refused[order[k]] = error
            return error

        check = lambda many, on_its_way: ctx.service.check_many(many, on_its_way, at)  # noqa: E731
        try:
            async with ctx.admitted_decisions(
                check, [bodies[i] for i in order], caller_class, units=len, caller=caller
            ) as (checked, ticket):
                decided = await ctx.service.run_many(checked, ticket, caller, at=at)
        except Overloaded as error:  # no room now: the same chunk again after the server's Retry-After
            tries += 1
            if tries >= OVERLOAD_TRIES:
                raise
            await asyncio.sleep(float(error.headers.get("Retry-After", 1)))
            continue
        except BlinkError:
            if not refused:
                raise
            for i, error in refused.items():
                answered[i] = failed(error)
                del bodies[i]
            continue
        for i, one in zip(order, decided, strict=True):
            answered[i] = Answered(200, response_body(ctx, one), None)
        break
    return answered


def stopped_at(done: int, total: int) -> str:
    return f"Stopped after {done:,} of {total:,} rows; the rows done are in the downloads."


def stopped_by(error: BaseException, done: int, total: int) -> str:
    """Why a run stopped before its end, and what the person can do, in words."""
    kept = stopped_at(done, total)
    if isinstance(error, QuotaExceeded):
        seconds = int(error.headers.get("Retry-After", 3600))
        when = time.strftime("%H:%M UTC", time.gmtime(time.time() + seconds))
        return (
            f"{kept} Your ZeroGPU quota ran out ({error.message.replace('`', '')}). Come back in about "
            f"{max(1, math.ceil(seconds / 60))} minutes (after {when}) to label the rest, or sign in to Hugging "
            "Face for a larger quota."
        )
    if isinstance(error, (GPUUnavailable, Overloaded)):
        seconds = int(error.headers.get("Retry-After", 30))
        return f"{kept} No GPU was free in time ({error.message}); try the rest again in {seconds} seconds."
    if isinstance(error, BlinkError):
        return f"{kept} {error.message.replace('`', '')}"
    return f"{kept} Internal error: {type(error).__name__}."


@dataclass
class Snapshot:
    """Where a run stands after a chunk: the rows done (each its input columns, then its answers), the downloads."""

    done: int
    total: int
    errors: int
    rows: list[dict]
    downloads: list[str]
    started: float
    stopped: str | None = None  # why it ended early, in words

    @property
    def rate(self) -> float:
        return self.done / max(time.monotonic() - self.started, 1e-6)


@dataclass
class SheetRun:
    ctx: Context
    table: Table
    columns: list[str]  # the state column(s)
    questions: dict
    answers: Answers
    workdir: Path
    caller: object = None
    caller_class: str = "anonymous"
    total: int = 0
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    def chunk_rows(self) -> int:
        """As many rows as a rerank takes documents, and no more than one request of this caller may hold."""
        return max(1, min(self.ctx.limits.max_documents, self.ctx.admission.gate("decide").most(self.caller_class)))

    async def run(self) -> AsyncIterator[Snapshot]:
        """A snapshot after each chunk; the last one says why when the run stopped early."""
        size, sinks = self.chunk_rows(), self._sinks()
        snap = Snapshot(0, self.total, 0, [], [], time.monotonic())
        parts: list[Path] = []
        rows_of = self.table.chunks(size)
        for k in range(math.ceil(self.total / size)):
            if self.stop.is_set():
                snap.stopped = stopped_at(snap.done, self.total)
                break
            chunk, arrow = await asyncio.to_thread(next, rows_of)
            rows = decision_rows(chunk, k * size, self.columns, self.questions, self.ctx.served_name, self.answers)
            try:
                answered = await decide_chunk(self.ctx, rows, self.caller, self.caller_class)
            except Exception as error:  # noqa: BLE001 - told in words; the rows done stay downloadable
                snap.stopped = stopped_by(error, snap.done, self.total)
                break
            parts.append(self.workdir / f"part-{k:05d}.{sinks['csv'].ext}")
            snap.errors += await asyncio.to_thread(sinks["csv"].write, parts[-1], rows, answered, arrow)
            snap.rows += shown_rows(sinks["csv"], rows, answered)
            snap.done += len(rows)
            snap.downloads = await asyncio.to_thread(self._downloads, sinks, parts)
            yield snap
        if snap.stopped:
            yield snap

    def _sinks(self) -> dict[str, TableParts]:
        delimiter = self.table.dialect.delimiter
        return {fmt: TableParts(self.answers, self.table.format, fmt, delimiter) for fmt in ("csv", "parquet")}

    def _downloads(self, sinks: dict[str, TableParts], parts: list[Path]) -> list[str]:
        """The rows done, joined into a CSV and a Parquet file (rewritten whole after each chunk)."""
        stem = Path(self.table.path).stem
        out = []
        for fmt, sink in sinks.items():
            path = self.workdir / f"{stem}.labelled.{fmt}"
            tmp = path.with_name(path.name + ".tmp")
            with open(tmp, "wb") as fh:
                sink.join(parts, fh)
            os.replace(tmp, path)
            out.append(str(path))
        return out


def shown_rows(sink: TableParts, rows: list, answered: list) -> list[dict]:
    """The chunk's rows as the table on the page shows them: the row's cells, then its answer columns."""
    out = []
    for row, answer in zip(rows, sink.answer_columns(rows, answered), strict=True):
        merged = dict(row.key) if isinstance(row.key, dict) else {}
        for name, value in answer.items():
            merged.setdefault(name, value)
        out.append(merged)
    return out


def how_answers_fall(answers: Answers, rows: list[dict]) -> dict[str, list[tuple[str, int]]]:
    """For each question, how many rows got each answer (a noul's: yes at P ≥ 0.5, else no; a choice's or a score's:
    its most probable option or level); rows with an error are not counted."""
    out = {}
    for q in answers.parsed:
        if q.type == "noul":
            names = ["yes", "no"]
            picked = [("yes" if row[answers.name(q.name)] >= 0.5 else "no") for row in rows if ok(row, answers, q)]
        else:
            names = list(q.options)
            picked = [
                max(names, key=lambda o, r=row: r[answers.name(q.name, o)]) for row in rows if ok(row, answers, q)
            ]
        out[q.name] = [(name, picked.count(name)) for name in names]
    return out


def ok(row: dict, answers: Answers, q) -> bool:
    return row.get(answers.error_column) is None and row.get(answers.name(q.name)) is not None
