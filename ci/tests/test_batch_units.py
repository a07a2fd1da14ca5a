"""run-batch's pieces by property, in process (no model): whatever bytes a batch file holds, each non-blank line is
exactly one row, answered or refused, and reading never raises; a text cell a spreadsheet would run is always escaped
and no other; the answer columns never take an input column's name; the sidecar's differences are empty exactly when
nothing differs."""

from __future__ import annotations

import io
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers.decision import DecisionConfig, Question

from blink.batch.requests_file import ROUTES, RequestsFile, lines
from blink.batch.tables import FORMULA_START, Answers, csv_safe
from blink.run_batch.journal import differences

CODES = {
    "invalid_json_line",
    "missing_custom_id",
    "duplicate_custom_id",
    "invalid_method",
    "invalid_url",
    "invalid_body",
    "line_too_large",
}
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
envelopes = st.fixed_dictionaries(
    {},
    optional={
        "custom_id": st.one_of(st.text(max_size=4), json_values),
        "method": st.sampled_from(["POST", "GET", "post", 1]),
        "url": st.sampled_from([*ROUTES, "/v1/nope", "", None]),
        "body": json_values,
    },
)


def rows_of(data: bytes, max_body_bytes: int = 1024):
    reader = RequestsFile("unused", max_body_bytes)
    return [reader.row(i, raw, number) for i, (raw, number) in enumerate(lines(io.BytesIO(data), reader.max_bytes))]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.binary(max_size=64) | envelopes.map(lambda e: json.dumps(e).encode()), max_size=12))
def test_every_non_blank_line_is_one_row_and_reading_never_raises(pieces):
    data = b"\n".join(p.replace(b"\n", b" ") for p in pieces)
    rows = rows_of(data)
    assert len(rows) == sum(1 for p in pieces if p.replace(b"\n", b" ").strip())
    for row in rows:
        assert (row.path is None) == (row.error is not None)
        if row.error is not None:
            assert row.error["code"] in CODES and row.error["message"]
        else:
            assert row.path in ROUTES and json.loads(row.body) is not None


@given(st.integers(1, 5), st.integers(0, 3))
def test_a_line_past_the_cap_is_skipped_without_being_held(over, after):
    cap = 1024 + 64 * 1024  # max_body_bytes + the envelope
    data = b"x" * (cap + over) + b"\n" + b'{"custom_id": "a", "url": "/tokenize", "body": {}}\n' * after
    rows = rows_of(data)
    assert rows[0].error["code"] == "line_too_large" and len(rows) == 1 + after
    assert [r.error["code"] for r in rows[2:]] == ["duplicate_custom_id"] * max(0, after - 1)


@given(st.text(max_size=12))
def test_a_cell_that_would_run_as_a_formula_is_escaped_and_no_other(text):
    out = csv_safe(text)
    if text.startswith(FORMULA_START):
        assert out == "'" + text
    else:
        assert out == text
    assert csv_safe(-0.5) == -0.5  # numbers are numbers


@given(st.lists(st.text(min_size=1, max_size=12) | st.sampled_from(["blink", "blink.refund", "blink_2.x"]), max_size=8))
def test_answer_columns_never_take_an_input_columns_name(columns):
    config = DecisionConfig()
    parsed = [
        Question.from_request("refund", {"type": "noul", "instructions": "?"}, config),
        Question.from_request(
            "team", {"type": "choice", "instructions": "?", "criteria": {"a": None, "b": None}}, config
        ),
    ]
    answers = Answers(parsed, columns)
    names = [name for name, _ in answers.columns]
    assert not set(names) & set(columns)
    assert names[-1] == answers.error_column and len(names) == len(set(names)) == 5


def test_questions_whose_columns_would_clash_are_refused():
    from blink.errors import StartupError

    config = DecisionConfig()
    parsed = [
        Question.from_request("a.p.x", {"type": "noul", "instructions": "?"}, config),
        Question.from_request("a", {"type": "choice", "instructions": "?", "criteria": {"x": None, "y": None}}, config),
    ]
    with pytest.raises(StartupError, match="'blink.a.p.x'"):
        Answers(parsed, [])


@given(json_values, json_values)
def test_the_sidecar_names_a_difference_exactly_when_there_is_one(a, b):
    assert (differences({"x": a}, {"x": b}) == []) == (a == b)


@pytest.mark.parametrize(
    "line",
    [b'{"custom_id": "a", "url": "/v1/systemone", "body": {"stream": true}}', b'{"custom_id": "a", "body": {}}'],
)
def test_streams_and_missing_urls_are_refused_by_the_line(line):
    (row,) = rows_of(line)
    assert row.error["code"] in {"invalid_body", "invalid_url"} and row.key == "a"
