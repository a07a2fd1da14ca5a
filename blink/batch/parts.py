"""A chunk's answers written as one part file, and the parts joined into the output.

The requests file's parts are its output lines. A table's parts are Parquet where the input is Parquet (its column
types kept), else JSON lines of the rows with their answer columns; they are joined into the output's format, its
columns the input's in their order, then the answers. A CSV's text cells that a spreadsheet would run as a
formula are escaped (blink.batch.tables.csv_safe); a CSV out is written with the input CSV's delimiter (a table
Excel wrote with semicolons comes back with semicolons, so the same spreadsheet opens it in columns).
"""

from __future__ import annotations

import io
from pathlib import Path

import orjson

from blink.batch.requests_file import output_line
from blink.batch.tables import Answers, csv_safe, csv_writer, jsonable
from blink.errors import StartupError


def dumps_line(value) -> bytes:
    return orjson.dumps(value, default=jsonable) + b"\n"


class RequestsParts:
    """OpenAI's batch output: one line per input line, in input order."""

    ext = "jsonl"

    def write(self, path: Path, rows: list, answered: list, arrow=None) -> int:
        errors = 0
        with open(path, "wb") as fh:
            for row, one in zip(rows, answered, strict=True):
                errors += row.error is not None or one.status != 200
                fh.write(dumps_line(output_line(row, one if row.error is None else None)))
        return errors

    def join(self, parts: list[Path], out) -> None:
        for part in parts:
            with open(part, "rb") as fh:
                while block := fh.read(1 << 20):
                    out.write(block)


class TableParts:
    def __init__(self, answers: Answers, in_format: str, out_format: str, delimiter: str = ","):
        self.answers, self.out_format, self.delimiter = answers, out_format, delimiter
        self.ext = "parquet" if in_format == "parquet" else "jsonl"

    def answer_columns(self, rows: list, answered: list) -> list[dict]:
        out = []
        for row, one in zip(rows, answered, strict=True):
            out.append(self.answers.empty(row.error["message"]) if row.error is not None else self.answers.of(one))
        return out

    def write(self, path: Path, rows: list, answered: list, arrow=None) -> int:
        columns = self.answer_columns(rows, answered)
        errors = sum(c[self.answers.error_column] is not None for c in columns)
        if arrow is not None:
            write_parquet_part(path, arrow, columns, self.answers)
            return errors
        with open(path, "wb") as fh:
            for row, answer in zip(rows, columns, strict=True):
                merged = dict(row.key) if isinstance(row.key, dict) else {}
                for name, value in answer.items():
                    merged.setdefault(name, value)  # an input column is never overwritten
                fh.write(dumps_line(merged))
        return errors

    def join(self, parts: list[Path], out) -> None:
        if self.ext == "parquet":
            join_parquet_parts(parts, out, self.out_format, self.delimiter)
        elif self.out_format == "jsonl":
            RequestsParts.join(self, parts, out)
        elif self.out_format == "csv":
            join_rows_csv(parts, out, self.answers, self.delimiter)
        else:
            join_rows_parquet(parts, out, self.answers)


def arrow_type(kind: str):
    import pyarrow as pa

    return {"string": pa.string(), "bool": pa.bool_()}.get(kind, pa.float64())


def write_parquet_part(path: Path, batch, columns: list[dict], answers: Answers) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_batches([batch])
    for name, kind in answers.columns:
        table = table.append_column(name, pa.array([c[name] for c in columns], type=arrow_type(kind)))
    pq.write_table(table, path)


def part_rows(path: Path):
    with open(path, "rb") as fh:
        for line in fh:
            yield orjson.loads(line)


def ordered_columns(parts: list[Path], answers: Answers) -> list[str]:
    """The output's columns: every input column in the order first seen, then the answers."""
    seen: dict = {}
    for part in parts:
        for row in part_rows(part):
            seen.update(dict.fromkeys(row))
    names = [name for name, _ in answers.columns]
    return [c for c in seen if c not in set(names)] + names


def csv_cell(value):
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return csv_safe(orjson.dumps(value).decode())
    return csv_safe(value)


def join_rows_csv(parts: list[Path], out, answers: Answers, delimiter: str = ",") -> None:
    columns = ordered_columns(parts, answers)
    text = io.TextIOWrapper(out, encoding="utf-8", newline="", write_through=True)
    writer = csv_writer(text, delimiter)
    writer.writerow([csv_safe(c) for c in columns])
    for part in parts:
        for row in part_rows(part):
            writer.writerow([csv_cell(row.get(c)) for c in columns])
    text.detach()


def join_rows_parquet(parts: list[Path], out, answers: Answers) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = ordered_columns(parts, answers)
    try:
        schemas = [pa.Table.from_pylist(list(part_rows(part))).schema for part in parts]
        unified = pa.unify_schemas(schemas, promote_options="permissive")
        for name, kind in answers.columns:
            unified = unified.set(unified.get_field_index(name), pa.field(name, arrow_type(kind)))
        schema = pa.schema([unified.field(c) for c in columns])
        with pq.ParquetWriter(out, schema) as writer:
            for part in parts:
                writer.write_table(pa.Table.from_pylist(list(part_rows(part)), schema=schema))
    except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
        raise StartupError(f"the rows do not make one Parquet table ({error}): write JSONL or CSV instead") from None


def join_parquet_parts(parts: list[Path], out, out_format: str, delimiter: str = ",") -> None:
    import pyarrow.parquet as pq

    if out_format == "parquet":
        schema = pq.read_schema(parts[0])
        with pq.ParquetWriter(out, schema) as writer:
            for part in parts:
                writer.write_table(pq.read_table(part).cast(schema))
        return
    text = io.TextIOWrapper(out, encoding="utf-8", newline="", write_through=True)
    writer = csv_writer(text, delimiter) if out_format == "csv" else None
    if writer is not None:
        writer.writerow([csv_safe(c) for c in pq.read_schema(parts[0]).names])
    for part in parts:
        for row in pq.read_table(part).to_pylist():
            if writer is not None:
                writer.writerow([csv_cell(jsonable(v)) for v in row.values()])
            else:
                text.write(dumps_line(row).decode())
    text.detach()
