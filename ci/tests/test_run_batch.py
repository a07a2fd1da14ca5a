"""`python -m blink run-batch` on the demo model, run as a command: an OpenAI batch file with every route kind and
every kind of bad line answers what `serve` answers to the same requests sent one by one (floats within 1e-6), in
OpenAI's batch output shape, one output line per input line; a table in each format (CSV, JSONL, Parquet) comes back
with its columns in order, then the answers, read by pandas and `datasets`; what needs no model is refused before it
loads. Resuming after SIGKILL and SIGTERM: test_run_batch_resume.py."""

from __future__ import annotations

import json

import httpx
import pytest

from helpers.batch import ANSWER_COLUMNS, QUESTIONS, close, read_lines, refusal, run_batch, run_table, tickets

pytestmark = pytest.mark.e2e

STATE = {"message": "I was charged twice. Please fix this today."}
GOOD = [
    ("/v1/systemone", {"model": "demo", "state": STATE, "questions": QUESTIONS}),
    ("/v1/systemone", {"model": "demo", "state": "The router blinks red.", "questions": QUESTIONS}),
    ("/v1/systemone", {"model": "demo", "state": "no questions"}),  # the route's own 422
    (
        "/v1/decisions",
        {
            "model": "demo",
            "input": "The parcel arrived crushed.",
            "questions": [
                {"type": "predicate", "name": "damaged", "instructions": "Was the item damaged?"},
                {"type": "choice", "instructions": "Which team?", "choices": [{"value": "returns"}, {"value": "bill"}]},
            ],
        },
    ),
    ("/v1/rerank", {"model": "demo", "query": "reset my password", "documents": ["Forgot password link", "Router"]}),
    ("/v2/rerank", {"model": "demo", "query": "refund", "documents": ["We refund in 5 days", "Office hours"]}),
    ("/rerank", {"model": "demo", "query": "late parcel", "documents": ["Shipping takes a week"], "top_n": 1}),
    ("/v1/score", {"model": "demo", "text_1": "refund policy", "text_2": ["Money back in 30 days", "Hours"]}),
    ("/score", {"model": "demo", "text_1": "a", "text_2": "b"}),
    ("/v1/moderations", {"model": "demo", "input": ["I will find you.", "Nice weather today."]}),
    ("/v1/completions", {"model": "demo", "prompt": "The sky is blue", "echo": True, "logprobs": 1, "max_tokens": 0}),
    (
        "/v1/chat/completions",
        {"model": "demo", "messages": [{"role": "user", "content": "Say hello"}], "max_tokens": 6, "temperature": 0},
    ),
    ("/v1/responses", {"model": "demo", "input": "Say hi", "max_output_tokens": 6, "temperature": 0}),
    ("/tokenize", {"model": "demo", "prompt": "Hello world"}),
    ("/detokenize", {"model": "demo", "tokens": [9707, 1879]}),
    ("/v1/rerank", {"model": "demo", "query": "x", "documents": []}),  # the route's own 4xx
]


def batch_line(custom_id: str, url: str, body: dict) -> str:
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": url, "body": body})


@pytest.fixture(scope="module")
def mixed(tmp_path_factory, demo_root):
    """A batch file of every route kind, good and bad lines between them, and run-batch's output."""
    folder = tmp_path_factory.mktemp("run-batch-mixed")
    lines = [batch_line(f"good-{i}", url, body) for i, (url, body) in enumerate(GOOD)]
    bad = [
        (b"this is not json", "invalid_json_line", None),
        (json.dumps({"method": "POST", "url": "/v1/systemone", "body": {}}).encode(), "missing_custom_id", None),
        (batch_line("good-0", *GOOD[0]).encode(), "duplicate_custom_id", "good-0"),
        (batch_line("bad-url", "/v1/embeddings", {"input": "x"}).encode(), "invalid_url", "bad-url"),
        (json.dumps({"custom_id": "get", "method": "GET", "url": "/v1/models"}).encode(), "invalid_method", "get"),
        (batch_line("stream", "/v1/chat/completions", {**GOOD[11][1], "stream": True}).encode(), "invalid_body", None),
        (
            json.dumps({"custom_id": "list", "method": "POST", "url": "/tokenize", "body": [1]}).encode(),
            "invalid_body",
            0,
        ),
        (b'{"custom_id": "latin", "body": "caf\xe9"}', "invalid_json_line", None),
        (batch_line("huge", "/v1/systemone", {"state": "x" * 300_000}).encode(), "line_too_large", None),
    ]
    raw = [line.encode() for line in lines]
    for k, (line, _, _) in enumerate(bad):  # interleaved with the good lines
        raw.insert(2 * k + 1, line)
    raw.insert(5, b"")  # blank lines are not rows
    path = folder / "in.jsonl"
    path.write_bytes(b"\n".join(raw) + b"\n")
    out = folder / "out.jsonl"
    done = run_batch(demo_root, "-i", str(path), "-o", str(out), "--max-body-bytes", "65536", "--chunk-rows", "5")
    assert done.returncode == 0, done.stderr[-4000:]
    return raw, bad, read_lines(out), done


def test_every_line_has_one_output_line_in_order(mixed):
    raw, bad, out, done = mixed
    rows = [line for line in raw if line.strip()]
    assert len(out) == len(rows)
    for line in out:
        assert set(line) == {"id", "custom_id", "response", "error"}
        assert line["id"].startswith("batch_req_")
        assert (line["response"] is None) != (line["error"] is None)
    assert len({line["id"] for line in out}) == len(out)
    assert "run-batch done" in done.stderr and f"{len(rows)} rows" in done.stderr


def test_bad_lines_are_their_own_error_lines(mixed):
    raw, bad, out, _ = mixed
    errors = [line for line in out if line["error"] is not None]
    assert [e["error"]["code"] for e in errors] == [code for _, code, _ in bad]
    duplicate = next(e for e in errors if e["error"]["code"] == "duplicate_custom_id")
    assert duplicate["custom_id"] == "good-0" and "on line 1" in duplicate["error"]["message"]
    latin = errors[[code for _, code, _ in bad].index("invalid_json_line", 1)]
    assert latin["error"]["message"].endswith("is not UTF-8")
    assert "/v1/systemone" in next(e for e in errors if e["error"]["code"] == "invalid_url")["error"]["message"]


def test_each_answer_is_what_serve_answers(mixed, server):
    _, _, out, _ = mixed
    answered = {line["custom_id"]: line for line in out if line["error"] is None}
    for i, (url, body) in enumerate(GOOD):
        line = answered[f"good-{i}"]
        sent = httpx.post(server + url, json=body, timeout=120)
        response = line["response"]
        assert response["status_code"] == sent.status_code, (url, response, sent.text)
        assert response["request_id"].startswith("req_")
        close(response["body"], sent.json(), f"good-{i} {url}")


@pytest.fixture(scope="module")
def tables(tmp_path_factory, demo_root):
    """The same 40-row table as CSV, Parquet and JSONL, each decided into another format."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path_factory.mktemp("run-batch-tables")
    rows = tickets(40)
    with open(folder / "t.csv", "w", newline="", encoding="utf-8") as fh:
        import csv

        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    pq.write_table(pa.Table.from_pylist(rows), folder / "t.parquet")
    (folder / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (folder / "q.json").write_text(json.dumps(QUESTIONS), encoding="utf-8")
    outs = {}
    for src, dst in (("csv", "parquet"), ("parquet", "jsonl"), ("jsonl", "csv")):
        out = folder / f"from-{src}.{dst}"
        args = ("--table", str(folder / f"t.{src}"), "--state-column", "text", "--questions", str(folder / "q.json"))
        done = run_batch(demo_root, *args, "-o", str(out), "--chunk-rows", "16")
        assert done.returncode == 0, done.stderr[-4000:]
        outs[dst] = out
    return rows, outs


def test_tables_come_back_in_every_format(tables):
    import datasets
    import pandas as pd

    rows, outs = tables
    frames = {
        "parquet": pd.read_parquet(outs["parquet"]),
        "jsonl": pd.read_json(outs["jsonl"], lines=True, dtype={"ticket": str}),
        "csv": pd.read_csv(outs["csv"], dtype={"ticket": str}, keep_default_na=False, na_values={"blink.error": [""]}),
    }
    for fmt, frame in frames.items():
        assert list(frame.columns) == ["ticket", "text", "note", *ANSWER_COLUMNS], fmt
        assert list(frame["ticket"]) == [r["ticket"] for r in rows], fmt
        assert frame["blink.error"].isna().all(), fmt
        probabilities = frame["blink.team.p.billing"] + frame["blink.team.p.technical"]
        assert ((probabilities - 1).abs() < 1e-6).all(), fmt
    for fmt in ("jsonl", "csv"):
        for column in ANSWER_COLUMNS[:-1]:
            a, b = frames["parquet"][column], frames[fmt][column]
            if column == "blink.team":
                assert list(a) == list(b)
            else:
                assert ((a - b).abs() <= 1e-6).all(), (fmt, column)
    cache = str(outs["csv"].parent / "hf-cache")
    loaders = {"csv": datasets.Dataset.from_csv, "parquet": datasets.Dataset.from_parquet}
    loaders["jsonl"] = datasets.Dataset.from_json
    for fmt, load in loaders.items():
        data = load(str(outs[fmt]), cache_dir=cache)
        assert data.num_rows == len(rows) and data.column_names[-len(ANSWER_COLUMNS) :] == ANSWER_COLUMNS


def test_a_csv_cell_never_runs_as_a_formula(tables):
    rows, outs = tables
    text = outs["csv"].read_text(encoding="utf-8")
    assert "=1+1" in json.dumps(rows) and ",=1+1," not in text and ",'=1+1," in text
    # the JSONL and Parquet outputs keep the cell as it was
    assert '"note":"=1+1"' in outs["jsonl"].read_text(encoding="utf-8")


def test_a_row_answers_what_systemone_answers(tables, server):
    rows, outs = tables
    out = read_lines(outs["jsonl"])
    for i in (0, 13, 39):
        sent = httpx.post(server + "/v1/systemone", json={"state": rows[i]["text"], "questions": QUESTIONS}, timeout=60)
        answers = sent.json()["answers"]
        assert abs(out[i]["blink.refund"] - answers["refund"]["noul"]) <= 1e-6
        assert out[i]["blink.team"] == answers["team"]["choice"]
        assert abs(out[i]["blink.anger"] - answers["anger"]["score"]) <= 1e-6
        for level, p in answers["anger"]["probabilities"].items():
            assert abs(out[i][f"blink.anger.p.{level}"] - p) <= 1e-6


def test_refused_before_the_model_loads(tmp_path, demo_root):
    table = tmp_path / "t.csv"
    table.write_text("id,body\n1,hello\n", encoding="utf-8")
    (tmp_path / "q.json").write_text(json.dumps(QUESTIONS), encoding="utf-8")
    out = str(tmp_path / "out.csv")
    base = ("--table", str(table), "--questions", str(tmp_path / "q.json"), "-o", out)
    missing = run_batch(demo_root, *base, "--state-column", "text", timeout=120)
    assert missing.returncode == 1 and "has no column 'text'; its columns: id, body" in missing.stderr
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    assert "is empty" in refusal("-i", str(empty), "-o", str(tmp_path / "o.jsonl"))
    assert "either" in refusal("-i", str(empty), *base)
    itself = refusal(*base[:4], "--state-column", "body", "-o", str(table), "--overwrite")
    assert "is the input" in itself and table.read_text().startswith("id,body")
    huge = refusal(*base, "--state-column", "body", "--chunk-rows", "10000000")
    assert "--chunk-rows must be between 1 and 65536" in huge
    header = tmp_path / "header.csv"
    header.write_text("id,body\n", encoding="utf-8")
    assert "has no rows after its header" in refusal("--table", str(header), *base[2:], "--state-column", "body")
    twice = tmp_path / "twice.csv"
    twice.write_text("body,body,id\nx,y,1\n", encoding="utf-8")
    assert "two columns named 'body'" in refusal("--table", str(twice), *base[2:], "--state-column", "body")
    # questions the API would refuse are refused once the model's readout is known, and nothing is written
    (tmp_path / "bad.json").write_text('{"q": {"type": "choice", "instructions": "?"}}', encoding="utf-8")
    questions = str(tmp_path / "bad.json")
    bad = run_batch(demo_root, "--table", str(table), "--state-column", "body", "--questions", questions, "-o", out)
    assert bad.returncode == 1 and "criteria" in bad.stderr and not (tmp_path / "out.csv").exists()


def test_rows_without_a_state_or_with_an_answer_columns_name_are_error_rows(tmp_path, demo_root):
    rows = [{"text": "I was charged twice."}, {"body": "no text column"}, {"text": "hi", "blink.refund": "mine"}, 7]
    rows += [{"text": None}, {"text": 42}, {"text": "42"}]
    table = tmp_path / "t.jsonl"
    table.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (tmp_path / "q.json").write_text(json.dumps({"questions": QUESTIONS}), encoding="utf-8")  # a whole request's file
    out = tmp_path / "out.jsonl"
    done = run_table(demo_root, table, tmp_path / "q.json", out)
    assert done.returncode == 0, done.stderr[-3000:]
    first, missing, clash, scalar, null, number, text = read_lines(out)
    assert first["blink.error"] is None and 0 < first["blink.refund"] < 1
    assert missing["body"] == "no text column" and missing["blink.error"] == "the row has no column 'text'"
    assert missing["blink.refund"] is None
    assert clash["blink.refund"] == "mine" and "answer column's name" in clash["blink.error"]  # its own value kept
    assert "line 4 is not a JSON object" in scalar["blink.error"]
    assert null["blink.error"] == "the state is empty"  # a gap in the table, not a text to decide about
    assert number["text"] == 42 and number["blink.error"] is None  # a number is decided as its text
    for column, value in text.items():
        if isinstance(value, float):
            assert abs(number[column] - value) <= 1e-6, column
        else:
            assert column == "text" or number[column] == value, column
    assert "7 rows, 4 errors" in done.stderr


def test_a_table_that_stops_being_readable_stops_the_run_in_words(tmp_path, demo_root):
    table = tmp_path / "t.csv"
    table.write_bytes(b"id,text\n1,fine\n2,a row,with a cell too many\n")
    (tmp_path / "q.json").write_text(json.dumps(QUESTIONS), encoding="utf-8")
    done = run_table(demo_root, table, tmp_path / "q.json", tmp_path / "out.csv")
    # (refused at its start here: pyarrow parses the first block when the file is opened)
    assert done.returncode == 1 and "cannot read" in done.stderr and "Expected 2 columns" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_table_as_excel_writes_it_in_europe(tmp_path, demo_root):
    """Semicolons, Windows-1252 and an empty cell (the newcomer's table): read in columns, the empty state an error
    row, said at the start, and written back with semicolons so the same spreadsheet opens it in columns."""
    table = tmp_path / "t.csv"
    lines = ["id;text;channel", "T1;Caf\u00e9 cr\u00e8me: charged twice, 5 \u20ac;mail", "T2;;phone", "T3;ok;web"]
    table.write_bytes("\r\n".join(lines).encode("cp1252") + b"\r\n")
    (tmp_path / "q.json").write_text(json.dumps(QUESTIONS), encoding="utf-8")
    out = tmp_path / "out.csv"
    done = run_table(demo_root, table, tmp_path / "q.json", out)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "read as Windows-1252 text, columns separated by semicolons" in done.stderr.splitlines()[0]
    assert "3 rows, 1 errors" in done.stderr
    header, *rows = out.read_text(encoding="utf-8").splitlines()
    assert header.split(";") == ["id", "text", "channel", *ANSWER_COLUMNS]
    cells = [row.split(";") for row in rows]
    assert cells[0][:3] == ["T1", "Caf\u00e9 cr\u00e8me: charged twice, 5 \u20ac", "mail"] and cells[0][-1] == ""
    assert cells[1][:3] == ["T2", "", "phone"] and cells[1][-1] == "the state is empty"
    assert all(c == "" for c in cells[1][3:-1])  # no answers for a gap
    assert 0 < float(cells[2][3]) < 1
