"""Tables as spreadsheets write them (blink.batch.dialect, read by blink.batch.tables.Table): any of the four
delimiters and the encodings Excel writes read back cell for cell; a file that is no text table, or text in no
encoding taken here, is refused in words that say what to do; an empty state cell is an error row, not a text."""

from __future__ import annotations

import csv
import io

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from blink.batch.dialect import SAVE_AS, Dialect
from blink.batch.tables import Table, state_of
from blink.errors import StartupError

NAMES = st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,11}", fullmatch=True)
CELL = st.text(st.characters(codec="cp1252", exclude_categories=("Cs", "Cc")), max_size=24)


def written(rows: list[list[str]], delimiter: str) -> str:
    out = io.StringIO()
    csv.writer(out, delimiter=delimiter, lineterminator="\n").writerows(rows)
    return out.getvalue()


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    header=st.lists(NAMES, min_size=2, max_size=4, unique=True),
    cells=st.lists(st.lists(CELL, min_size=4, max_size=4), min_size=1, max_size=5),
    delimiter=st.sampled_from(",;\t|"),
    encoding=st.sampled_from(["utf-8", "utf-8-sig", "utf-16", "cp1252"]),
)
def test_every_delimiter_and_encoding_excel_writes_reads_back_cell_for_cell(
    tmp_path, header, cells, delimiter, encoding
):
    rows = [row[: len(header)] for row in cells]
    data = written([header, *rows], delimiter).encode(encoding)
    if encoding == "cp1252":
        try:  # text that is also valid UTF-8 is read as UTF-8, as every spreadsheet would
            data.decode("utf-8")
            assume(False)
        except UnicodeDecodeError:
            pass
    path = tmp_path / "t.csv"
    path.write_bytes(data)
    table = Table(str(path), "csv", 1 << 20)
    assert table.columns == header
    assert table.dialect.delimiter == delimiter
    read = [row for chunk, _ in table.chunks(2) for row in chunk]
    assert read == [dict(zip(header, row)) for row in rows]


@pytest.mark.parametrize(
    ("data", "dialect", "note"),
    [
        (b"id;text\nT1;Hallo, Welt\n", Dialect("utf-8", ";"), "columns separated by semicolons"),
        ("id,text\nT1,Caf\u00e9 \u20ac5\n".encode("cp1252"), Dialect("cp1252", ","), "read as Windows-1252 text"),
        ("id\ttext\nT1,x\tok\n".encode("utf-16"), Dialect("utf-16", "\t"), "read as UTF-16 text, columns separated"),
        ("\ufeffid,text\nT1,x\n".encode(), Dialect("utf-8", ","), None),
        (b'text\n"hello; there, you"\n', Dialect("utf-8", ","), None),  # one column: nothing to tell by
    ],
)
def test_the_dialect_found_and_what_is_said_of_it(tmp_path, data, dialect, note):
    path = tmp_path / "t.csv"
    path.write_bytes(data)
    table = Table(str(path), "csv", 1 << 20)
    assert table.dialect == dialect
    assert (table.dialect.note() or "").startswith(note or "")
    assert table.columns[-1] == "text"


@pytest.mark.parametrize(
    ("data", "name", "words"),
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00", "picture.csv", "is not a text table (it holds binary data)"),
        (b"PK\x03\x04\x14\x00\x06\x00\x08\x00\x00\x00!\x00", "book.csv", "is not a text table"),
        (b"id,text\n1,\x81\x8d\x90 \xe9\n", "odd.csv", f"is neither UTF-8 nor Windows-1252 text: {SAVE_AS}"),
        ("{}\n".encode("utf-16"), "rows.jsonl", "is not UTF-8 text, as JSON lines must be"),
    ],
)
def test_what_is_no_text_table_is_refused_saying_what_to_do(tmp_path, data, name, words):
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(StartupError) as refused:
        Table(str(path), name.rsplit(".", 1)[1], 1 << 20)
    assert words in str(refused.value)
    assert "codec" not in str(refused.value) and "0x" not in str(refused.value)  # no parser's jargon


@pytest.mark.parametrize(
    ("row", "columns", "error"),
    [
        ({"text": ""}, ["text"], "the state is empty"),
        ({"text": "  \t"}, ["text"], "the state is empty"),
        ({"text": None}, ["text"], "the state is empty"),
        ({"text": float("nan")}, ["text"], "the state is empty"),
        ({"a": "", "b": None}, ["a", "b"], "the state columns are all empty"),
        ({"a": "", "b": "x"}, ["a", "b"], None),  # one of several may be empty: the others are the state
        ({"text": 0}, ["text"], None),  # a zero is a value
        ({"text": False}, ["text"], None),
    ],
)
def test_an_empty_state_is_an_error_row(row, columns, error):
    state, why = state_of(row, columns)
    assert why == error
    assert (state is None) == (error is not None)


def test_a_line_cut_mid_json_names_one_line_the_files():
    from blink.batch.requests_file import RequestsFile
    from blink.batch.tables import json_row

    raw = b'{"custom_id": "c", "body": {"state": "x"\n'
    for said in (str(json_row(raw, 3)), RequestsFile("unused", 1024).row(2, raw, 3).error["message"]):
        assert said == "line 3 is not JSON (it ends before its JSON does: cut short?)"
    said = str(json_row(b'{"state": "x",, "y": 1}\n', 7))
    assert said.startswith("line 7 is not JSON (unexpected character") and said.endswith(
        " at character 15 of the line)"
    )
