"""A labelled table's evaluation: the answers blink wrote beside each row read against the row's label column.

`parse_labels` pairs questions with the columns holding their true answers (run-batch's `--label QUESTION=COLUMN`)
and checks them before any row is decided. `report_of` then reads the labelled table (the output: the input's columns
and blink's answer columns) and returns the report of every question (blink.tasks.evaluation), with every row that
could not count listed by number and reason: a row blink answered with an error, a row with no label, a label that
is not one of the question's options. Only row numbers name rows: a report never repeats a state.

A label is written as people write it in a table: a choice's option id; a score's level by its index (0 lowest) or
its option name; a noul's truth as true/false, yes/no or 1/0 (any case).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from blink.errors import StartupError
from blink.tasks.certify import ALPHA, DELTA

TRUE, FALSE = {"true", "yes", "1", "1.0"}, {"false", "no", "0", "0.0"}
SHOWN_PROBLEMS = 100  # rows listed per question at most (the count is always whole)


@dataclass(frozen=True)
class Question:
    """What the report needs of one question: its id, type, options and its answer columns' names."""

    qid: str
    kind: str
    options: tuple[str, ...]
    answer: str  # the answer column (noul: P(true))
    per_option: tuple[str, ...]  # the option probability columns, in `options` order (none for noul)


def parse_labels(given: list[str] | None, questions: dict, columns: list[str], state_columns: list[str]) -> dict:
    """`--label QUESTION=COLUMN` arguments as {question id: column}, refused in words where a question or a column
    is not there, a question is labelled twice, or the label is a state column (the model would read the answer)."""
    labels: dict[str, str] = {}
    for item in given or []:
        qid, sep, column = item.partition("=")
        if not sep or not qid or not column:
            raise StartupError(f"--label {item!r}: write it QUESTION=COLUMN, e.g. --label urgent=is_urgent")
        if qid not in questions:
            raise StartupError(
                f"--label {item!r}: no question {qid!r} in --questions (its ids: {', '.join(questions)})"
            )
        if column not in columns:
            raise StartupError(
                f"--label {item!r}: the table has no column {column!r}; its columns: {', '.join(columns)}"
            )
        if column in state_columns:
            raise StartupError(f"--label {item!r}: {column!r} is a state column, so the model would read the answer")
        if qid in labels:
            raise StartupError(f"--label: question {qid!r} is labelled twice ({labels[qid]!r} and {column!r})")
        labels[qid] = column
    return labels


def report_path(output_file: str) -> Path:
    """Where the report of OUTPUT goes: beside it, its extension replaced (labelled.csv -> labelled.report.json)."""
    out = Path(output_file)
    return out.with_name(out.stem + ".report.json")


def label_index(question: Question, value) -> int | str:
    """The index of the true option, or why `value` is none of the question's options."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # a column of level numbers with a gap in it: pandas writes them as floats (2.0)
    text = str(value).strip() if value is not None and not _nan(value) else ""
    if not text:
        return "no label"
    if question.kind == "noul":
        lowered = text.lower()
        if lowered in TRUE or lowered in FALSE:
            return question.options.index("true" if lowered in TRUE else "false")
        return f"the label {text!r} is not true/false, yes/no or 1/0"
    if text in question.options:
        return question.options.index(text)
    if question.kind == "score" and text.isdigit() and int(text) < len(question.options):
        return int(text)
    shown = ", ".join(map(repr, question.options[:10])) + (", …" if len(question.options) > 10 else "")
    levels = f" or a level 0-{len(question.options) - 1}" if question.kind == "score" else ""
    return f"the label {text!r} is not one of the options ({shown}){levels}"


def probabilities_of(question: Question, row: dict) -> list[float] | None:
    """The row's probability of every option, in order (noul: [P(true), P(false)] as its options are ordered), or
    None where blink wrote none."""
    try:
        if question.kind == "noul":
            p_true = _number(row.get(question.answer))
            return [p_true if o == "true" else 1.0 - p_true for o in question.options]
        return [_number(row.get(column)) for column in question.per_option]
    except (TypeError, ValueError):
        return None


def _number(value) -> float:
    x = float(value)  # a CSV holds text; a blank cell raises ValueError, a null TypeError
    if not math.isfinite(x):
        raise ValueError(value)
    return x


def _nan(value) -> bool:
    return isinstance(value, float) and math.isnan(value)


class Collected:
    """One question's usable rows, gathered as the table is read."""

    def __init__(self, question: Question, label_column: str):
        self.question, self.label_column = question, label_column
        self.probabilities: list[list[float]] = []
        self.labels: list[int] = []
        self.rows: list[int] = []
        self.problems: list[dict] = []
        self.unusable = 0

    def add(self, number: int, row: dict, error_column: str) -> None:
        if row.get(error_column):
            return self._problem(number, "blink answered the row with an error (see its error column)")
        label = label_index(self.question, row.get(self.label_column))
        if isinstance(label, str):
            return self._problem(number, label)
        p = probabilities_of(self.question, row)
        if p is None:
            return self._problem(number, "the row has no probabilities")
        self.probabilities.append(p)
        self.labels.append(label)
        self.rows.append(number)

    def _problem(self, number: int, reason: str) -> None:
        self.unusable += 1
        if len(self.problems) < SHOWN_PROBLEMS:
            self.problems.append({"row": number, "reason": reason})


def report_of(rows, questions: list[Question], labels: dict, error_column: str, alpha=ALPHA, delta=DELTA) -> dict:
    """The report of a labelled table's `rows` (dicts, in order; row numbers from 1 as a person counts data rows)
    for each question in `labels` ({question id: label column}). Nothing is fitted on the rows, so every counted row
    is held out for the certificate (at `alpha`, `delta`)."""
    from blink.tasks.evaluation import evaluate

    collected = {q.qid: Collected(q, labels[q.qid]) for q in questions if q.qid in labels}
    total = 0
    for number, row in enumerate(rows, start=1):
        total = number
        for c in collected.values():
            c.add(number, row if isinstance(row, dict) else {}, error_column)
    out = {}
    for qid, c in collected.items():
        counted = {"label_column": labels[qid], "rows": total, "unusable": c.unusable, "unusable_rows": c.problems}
        if c.labels:
            kind, options = c.question.kind, list(c.question.options)
            counted.update(evaluate(kind, options, c.probabilities, c.labels, c.rows, alpha=alpha, delta=delta))
            counted["fitted"] = fitted(kind, options, c.probabilities, c.labels, alpha, delta)
        else:
            counted.update(type=c.question.kind, n=0, options=list(c.question.options))
        out[qid] = counted
    split = "every counted row: nothing was fitted on them, so all are held out for the certificate"
    return {"rows": total, "held_out": split, "questions": out}


def fitted(kind: str, options: list[str], probabilities, labels, alpha=ALPHA, delta=DELTA) -> dict:
    """What fitting these labels would do (blink.tasks.fit): the method kept and why, its parameters, the figures of
    its out-of-fold answers beside the served ones', and what a fit made on part of the rows certifies on the rest."""
    from blink.tasks.evaluation import figures
    from blink.tasks.fit import cross_validate, fit_then_certify

    fit = cross_validate(probabilities, labels)
    held_out = fit.pop("held_out", None)
    if held_out is not None:
        fit["cross_validated"] = figures(kind, held_out, labels)
        fit["certificate"] = fit_then_certify(probabilities, labels, alpha, delta)
    return fit


def questions_of(answers) -> list[Question]:
    """The questions of a table's answer columns (blink.batch.tables.Answers), as the report reads them."""
    return [
        Question(
            q.name,
            q.type,
            tuple(q.options),
            answers.name(q.name),
            () if q.type == "noul" else tuple(answers.name(q.name, option) for option in q.options),
        )
        for q in answers.parsed
    ]


def summary(report: dict) -> list[str]:
    """A line per question for the terminal: n, accuracy with its interval, ECE, and what a 0.9 gate would do."""
    lines = []
    for qid, r in report["questions"].items():
        skipped = f"; {r['unusable']} rows not counted" if r["unusable"] else ""
        if not r["n"]:
            lines.append(f"  {qid}: no row could be counted{skipped} (the report lists why)")
            continue
        lo, hi = r["intervals"]["accuracy"]
        at = next(g for g in r["gates"] if g["threshold"] == 0.9)
        gated = "no answer reaches it" if not at["answered"] else f"{at['coverage']:.0%} answered, {at['wrong']} wrong"
        lines.append(
            f"  {qid}: n={r['n']} accuracy {r['accuracy']:.3f} (95% {lo:.3f}-{hi:.3f}), ECE {r['ece']:.3f}, "
            f"at confidence >= 0.9: {gated}{skipped}"
        )
        lines.append(f"    {certified(r['certificate'])}")
        lines.append(f"    {refit(r)}")
    return lines


def refit(r: dict) -> str:
    """What a fit to the labels would do, in one line."""
    f = r["fitted"]
    if "cross_validated" not in f:
        return f"fitted to these labels: nothing; {f['why']}"
    if f["kept"] == "none":
        return f"fitted to these labels ({f['folds']}-fold): nothing kept; {f['why']}"
    cv, c = f["cross_validated"], f["certificate"]
    split = f"fitted on {c['fit_rows']} rows, certified on the other {c['certify_rows']}"
    return (
        f"fitted to these labels ({f['folds']}-fold): {f['kept']} kept; held out, NLL {cv['nll']:.3f} (served "
        f"{r['nll']:.3f}), ECE {cv['ece']:.3f} (served {r['ece']:.3f}), accuracy {cv['accuracy']:.3f}\n"
        f"    {split}: {certified(c).removeprefix('certified at ')}"
    )


def certified(c: dict) -> str:
    """The certificate in one line."""
    at = f"alpha {c['alpha']:g}, delta {c['delta']:g}"
    if c["threshold"] is None:
        return f"certified at {at}: nothing; {c['reason']}"
    return (
        f"certified at {at}: answers at confidence >= {c['threshold']:g}, {c['coverage']:.0%} of the rows "
        f"({c['wrong']} of {c['answered']} wrong)"
    )
