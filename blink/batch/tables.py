"""Tables in (CSV, JSONL, Parquet; pyarrow): each row a System One decision of the same questions, its state the
named column (several columns: a JSON object of them); the answers as columns after the row's own.

Rows are read in chunks, never the whole file at once: CSV with pyarrow's streaming reader (every column as
text, so a CSV written back holds the cells as they were; its encoding and delimiter found first, blink.batch.dialect),
Parquet by record batches (its types kept), JSONL line by line (a row is any JSON object). A row whose state is empty
is an error row: in a table an empty cell is a gap in the data, not a text to decide about.
"""

from __future__ import annotations

import csv
import itertools
import math
import os
from collections.abc import Iterable, Iterator
from contextlib import closing
from typing import Any

import orjson

from blink.batch.dialect import Dialect, of_file
from blink.batch.requests_file import Row, lines, not_json
from blink.errors import StartupError

FORMATS = ("csv", "jsonl", "parquet")


def format_of(path: str, given: str | None = None) -> str:
    """A table's format: as given, else its file name's extension."""
    if given:
        return given
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    ext = {"json": "jsonl", "ndjson": "jsonl", "pq": "parquet"}.get(ext, ext)
    if ext not in FORMATS:
        raise StartupError(f"{path}: say which format it is (--table-format / --output-format: csv, jsonl, parquet)")
    return ext


class Table:
    """One input table: its columns (known before any row is decided) and its rows in chunks."""

    def __init__(self, path: str, fmt: str, max_bytes: int):
        self.path, self.format, self.max_bytes = path, fmt, max_bytes
        try:
            self.dialect: Dialect = of_file(path, fmt)
        except OSError as error:
            raise StartupError(f"{path}: cannot read it: {error}") from None
        self.columns = self._columns()
        twice = sorted({name for name in self.columns if self.columns.count(name) > 1})
        if twice:  # a row is keyed by name: one of the two would be lost
            raise StartupError(f"{path}: it has two columns named {twice[0]!r}; give every column a name of its own")

    def _columns(self) -> list[str]:
        try:
            if self.format == "csv":
                import pyarrow.csv as pcsv

                d = self.dialect
                with pcsv.open_csv(self.path, read_options=d.read_options(), parse_options=d.parse_options()) as reader:
                    return list(reader.schema.names)
            if self.format == "parquet":
                import pyarrow.parquet as pq

                return list(pq.ParquetFile(self.path).schema_arrow.names)
            with open(self.path, "rb") as fh:
                for raw, number in lines(fh, self.max_bytes):
                    row = json_row(raw, number)
                    return list(row) if isinstance(row, dict) else []
            return []
        except (OSError, ValueError) as error:  # pyarrow's errors are ValueErrors (ArrowInvalid)
            raise StartupError(f"{self.path}: cannot read it as {self.format}: {error}") from None

    def has_rows(self) -> bool:
        """Whether a row follows the header (Parquet: its footer says; else the first chunk is read and let go)."""
        if self.format == "parquet":
            import pyarrow.parquet as pq

            return pq.ParquetFile(self.path).metadata.num_rows > 0
        with closing(self.chunks(1)) as chunks:  # the file closed now, not when the generator is collected
            return next(chunks, None) is not None

    def chunks(self, size: int | Iterable[int]) -> Iterator[tuple[list, Any]]:
        """(rows, the chunk as Arrow where the table is Parquet, else None), `size` rows each (or the sizes in turn);
        each row a dict or, for a JSONL line that is not an object, the error saying so. A file that stops being
        readable part way (a ragged CSV row, a truncated Parquet file) stops the run with pyarrow's reason, the parts
        written so far kept."""
        import pyarrow as pa

        sizes = itertools.repeat(size) if isinstance(size, int) else iter(size)
        try:
            yield from self._chunks(sizes)
        except (pa.ArrowInvalid, OSError) as error:
            raise StartupError(f"{self.path}: cannot read on: {error}") from None

    def _chunks(self, sizes: Iterator[int]) -> Iterator[tuple[list, Any]]:
        if self.format == "parquet":
            yield from self._parquet_chunks(sizes)
        elif self.format == "csv":
            yield from regroup(self._csv_batches(), sizes)
        else:
            yield from regroup(self._jsonl_lines(), sizes)

    def _parquet_chunks(self, sizes: Iterator[int]):
        import pyarrow as pa
        import pyarrow.parquet as pq

        pending, rows = [], 0
        size = next(sizes)
        for batch in pq.ParquetFile(self.path).iter_batches(batch_size=1024):
            pending.append(batch)
            rows += batch.num_rows
            while rows >= size:
                whole = pa.Table.from_batches(pending)
                head = pa.concat_batches(whole.slice(0, size).to_batches())
                yield head.to_pylist(), head
                pending, rows = whole.slice(size).to_batches(), rows - size
                size = next(sizes)
        if rows:
            head = pa.concat_batches(pending)
            yield head.to_pylist(), head

    def _csv_batches(self):
        import pyarrow as pa
        import pyarrow.csv as pcsv

        types = {name: pa.string() for name in self.columns}
        convert = pcsv.ConvertOptions(column_types=types, strings_can_be_null=False)
        d = self.dialect
        options = {"read_options": d.read_options(), "parse_options": d.parse_options(), "convert_options": convert}
        with pcsv.open_csv(self.path, **options) as reader:
            for batch in reader:
                yield batch.to_pylist()

    def _jsonl_lines(self):
        with open(self.path, "rb") as fh:
            for raw, number in lines(fh, self.max_bytes):
                yield [json_row(raw, number)]


def regroup(pieces: Iterator[list], sizes: Iterator[int]) -> Iterator[tuple[list, None]]:
    """Rows read in pieces of any length as chunks of the sizes asked, in turn (the last one what is left)."""
    pending: list = []
    size = next(sizes)
    for piece in pieces:
        pending.extend(piece)
        while len(pending) >= size:
            yield pending[:size], None
            pending = pending[size:]
            size = next(sizes)
    if pending:
        yield pending, None


def json_row(raw: bytes | None, number: int):
    if raw is None:
        return ValueError(f"line {number} is too long")
    try:
        row = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        return ValueError(not_json(number, raw, error))
    return row if isinstance(row, dict) else ValueError(f"line {number} is not a JSON object")


class Answers:
    """The answer columns of a table: for each question its answer and one column per option's probability, then an
    error column; named under a prefix that no input column starts with."""

    def __init__(self, parsed: list, input_columns: list[str], prefix: str = "blink", task: bool = False):
        """`task`: the rows are a task's (`x_task`): a column per question says whether its answer is certified."""
        self.parsed = parsed
        self.task = task
        taken = set(input_columns)
        base, n = prefix, 1
        while any(c == base or c.startswith(base + ".") for c in taken):
            n += 1
            base = f"{prefix}_{n}"
        self.prefix = base
        self.columns: list[tuple[str, str]] = []  # (name, "float" | "string")
        for q in parsed:
            self.columns.append((self.name(q.name), "string" if q.type == "choice" else "float"))
            if q.type != "noul":
                self.columns += [(self.name(q.name, option), "float") for option in q.options]
            if task:
                self.columns.append((self.certified(q.name), "bool"))
        self.columns.append((self.error_column, "string"))
        names = [name for name, _ in self.columns]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise StartupError(f"the questions' ids give two answer columns the name {twice[0]!r}: rename one")

    @property
    def error_column(self) -> str:
        return f"{self.prefix}.error"

    def name(self, qid: str, option: str | None = None) -> str:
        return f"{self.prefix}.{qid}" if option is None else f"{self.prefix}.{qid}.p.{option}"

    def certified(self, qid: str) -> str:
        return f"{self.prefix}.{qid}.certified"

    def empty(self, error: str | None) -> dict:
        out = {name: None for name, _ in self.columns}
        out[self.error_column] = error
        return out

    def of(self, answered) -> dict:
        """A row's answer columns from what /v1/systemone answered (an error body's message in the error column)."""
        body = answered.body if isinstance(answered.body, dict) else {}
        if answered.status != 200:
            return self.empty(f"{answered.status}: {error_message(body) or answered.body}")
        out = self.empty(None)
        for q in self.parsed:
            answer = body["answers"][q.name]
            out[self.name(q.name)] = answer.get(q.type)
            for option, p in (answer.get("probabilities") or {}).items():
                out[self.name(q.name, option)] = p
            if self.task:
                out[self.certified(q.name)] = body["x_task"]["questions"][q.name]["certified"]
        return out


def error_message(body: dict) -> str | None:
    """A refusal's words: OpenAI's `{"error": {"message"}}`, or System One's `{"error": "..."}`."""
    error = body.get("error")
    if isinstance(error, dict):
        error = error.get("message")
    return error if isinstance(error, str) else None


def state_of(row, columns: list[str]) -> tuple[Any, str | None]:
    """A row's state: the one column's value (a number or truth value as its text: a table's column of numbers is
    text to decide about), or a JSON object of several; or why it has none."""
    if isinstance(row, Exception):
        return None, str(row)
    missing = [c for c in columns if c not in row]
    if missing:
        return None, f"the row has no column {', '.join(map(repr, missing))}"
    if all(is_empty(row[c]) for c in columns):
        return None, "the state is empty" if len(columns) == 1 else "the state columns are all empty"
    if len(columns) == 1:
        return as_text(jsonable(row[columns[0]])), None
    return {c: jsonable(row[c]) for c in columns}, None


def is_empty(value) -> bool:
    """A cell with nothing in it: none, blank text, or a float that is no number (NaN: pandas' missing value)."""
    if isinstance(value, float):
        return math.isnan(value)
    return value is None or (isinstance(value, str) and not value.strip())


def as_text(value):
    """A number or truth value as JSON writes it; infinity as missing, for the route to refuse in words."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return orjson.dumps(value).decode() if isinstance(value, (bool, int, float)) else value


def jsonable(value):
    """A cell as JSON takes it (Parquet's dates, decimals and bytes as text)."""
    if value is None or isinstance(value, (str, int, float, bool, list, dict)):
        return value
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def decision_rows(
    chunk: list,
    start: int,
    columns: list[str],
    questions: dict,
    model: str,
    answers: Answers,
    extra: dict | None = None,
) -> list:
    """The chunk's rows as System One requests (`start`: the first row's index in the table; `extra`: fields every
    request carries, as `x_task`). A JSON row with a key that is an answer column's name (the prefix is chosen from
    the first row's keys) gets an error, not answers that would overwrite its own value."""
    names = {name for name, _ in answers.columns}
    out = []
    for i, row in enumerate(chunk):
        state, error = state_of(row, columns)
        clash = [k for k in row if k in names] if isinstance(row, dict) else []
        if clash:
            error = f"its column {clash[0]!r} has an answer column's name: rename it, or choose --answer-prefix"
        if error is not None:
            out.append(Row(start + i, error={"code": "invalid_row", "message": error}, key=row))
            continue
        body = orjson.dumps({"model": model, "state": state, "questions": questions, **(extra or {})}, default=str)
        out.append(Row(start + i, "/v1/systemone", body, key=row))
    return out


FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_safe(value):
    """A text cell a spreadsheet would run as a formula, escaped with a leading apostrophe (OWASP's advice)."""
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value


def csv_writer(fh, delimiter: str = ","):
    return csv.writer(fh, delimiter=delimiter, lineterminator="\n")
