"""The evaluation of answers against labels (blink.tasks): its figures held to scikit-learn's on random inputs (to
1e-9), ECE to calibrate's own and a reference loop, the curve and the gates to brute force; and run-batch `--label`
on the demo model, its report judged by scikit-learn from the labelled table it wrote."""

from __future__ import annotations

import csv
import json
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn import metrics as sk

from blink.decide.calibration import Example, metrics
from blink.errors import StartupError
from blink.tasks.certify import certify
from blink.tasks.evaluation import evaluate
from blink.tasks.fit import cross_validate
from blink.tasks.labelled import Question, label_index, parse_labels, report_of
from blink.tasks.report_page import page
from helpers.batch import QUESTIONS, refusal, run_batch, run_table, tickets

KINDS = {"noul": ["true", "false"], "choice": ["a", "b", "c", "d"], "score": ["0", "1", "2", "3", "4"]}


def sample(kind: str, n: int, seed: int, skill: float):
    """n rows of probabilities and labels: a model right about `skill` of the time, its confidence spread out."""
    rng = np.random.default_rng(seed)
    k = len(KINDS[kind])
    p = rng.dirichlet(np.ones(k) * 0.7, size=n)
    y = np.where(rng.random(n) < skill, p.argmax(axis=1), rng.integers(0, k, size=n))
    return p, y


def sklearn_figures(kind: str, p, y) -> dict:
    k = p.shape[1]
    top = p.argmax(axis=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an option never answered: scikit-learn warns and counts its F1 as 0
        f1 = sk.f1_score(y, top, average="macro")
    return {
        "accuracy": sk.accuracy_score(y, top),
        "macro_f1": f1,
        "nll": sk.log_loss(y, p, labels=list(range(k))),
        "brier": sk.brier_score_loss(y, p, labels=list(range(k)), scale_by_half=kind == "noul"),
        "confusion": sk.confusion_matrix(y, top, labels=list(range(k))).tolist(),
    }


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(KINDS)), st.integers(1, 400), st.integers(0, 2**32 - 1), st.floats(0.0, 1.0))
def test_the_figures_are_scikit_learns(kind, n, seed, skill):
    p, y = sample(kind, n, seed, skill)
    report = evaluate(kind, KINDS[kind], p, y)
    judge = sklearn_figures(kind, p, y)
    for name in ("accuracy", "macro_f1", "nll", "brier"):
        assert abs(report[name] - judge[name]) <= 1e-9, (name, report[name], judge[name])
    assert report["confusion"] == judge["confusion"]
    if kind == "score":
        assert abs(report["mae_levels"] - sk.mean_absolute_error(y, p.argmax(axis=1))) <= 1e-9


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(KINDS)), st.integers(1, 400), st.integers(0, 2**32 - 1), st.floats(0.0, 1.0))
def test_ece_is_calibrates_and_the_reference_loops(kind, n, seed, skill):
    p, y = sample(kind, n, seed, skill)
    report = evaluate(kind, KINDS[kind], p, y)
    # equal width: blink calibrate's own figure (its rows are logits: log p gives p back)
    theirs = metrics([Example([np.log(row).tolist()], int(label), None) for row, label in zip(p, y)])
    assert abs(report["ece"] - theirs["ece"]) <= 1e-9 and abs(report["accuracy"] - theirs["accuracy"]) <= 1e-12
    # equal mass: 10 groups by rank of confidence, the first n % 10 one row larger
    conf, hit = p.max(axis=1), p.argmax(axis=1) == y
    order, start, gaps = np.argsort(conf, kind="stable"), 0, 0.0
    for g in range(min(10, n)):
        size = n // min(10, n) + (g < n % min(10, n))
        group = order[start : start + size]
        gaps += abs(sum(float(hit[i]) - float(conf[i]) for i in group))
        start += size
    assert start == n and abs(report["ece_equal_mass"] - gaps / n) <= 1e-9
    # the reliability table holds every row once, each bin's figures its rows'
    assert sum(b["count"] for b in report["reliability"]) == n
    for b in report["reliability"]:
        lo, hi = b["bin"]
        inside = (conf >= lo) & ((conf < hi) | (hi == 1.0))
        assert b["count"] == inside.sum() and abs(b["accuracy"] - hit[inside].mean()) <= 1e-12


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(sorted(KINDS)), st.integers(1, 300), st.integers(0, 2**32 - 1))
def test_the_curve_and_the_gates_are_what_acting_on_them_does(kind, n, seed):
    p, y = sample(kind, n, seed, 0.6)
    p = np.round(p, 2)  # ties in confidence, as a table of few distinct answers has
    p = p / p.sum(axis=1, keepdims=True)
    report = evaluate(kind, KINDS[kind], p, y, rows=np.arange(n) + 1)
    conf, hit = p.max(axis=1), p.argmax(axis=1) == y
    thresholds = sorted(set(conf.tolist()), reverse=True)
    assert [c["threshold"] for c in report["risk_coverage"]] == thresholds
    for point in report["risk_coverage"]:
        passed = conf >= point["threshold"]
        assert point["coverage"] == passed.mean() and abs(point["error_rate"] - (~hit[passed]).mean()) <= 1e-12
    for g in report["gates"]:
        passed = conf >= g["threshold"]
        assert g["answered"] == passed.sum() and g["wrong"] == (passed & ~hit).sum()
        assert g["wrong_rows"] == [int(r) + 1 for r in np.flatnonzero(passed & ~hit)][:100]


def test_the_intervals_are_seeded_and_as_wide_as_the_sample_allows():
    p, y = sample("choice", 400, 7, 0.7)
    one, two = evaluate("choice", KINDS["choice"], p, y), evaluate("choice", KINDS["choice"], p, y)
    assert one["intervals"] == two["intervals"]
    lo, hi = one["intervals"]["accuracy"]
    a = one["accuracy"]
    assert lo < a < hi
    normal = 2 * 1.96 * (a * (1 - a) / 400) ** 0.5  # the normal approximation's width
    assert 0.8 * normal < hi - lo < 1.2 * normal
    elo, ehi = one["intervals"]["ece"]
    assert elo < one["ece"] < ehi or abs(one["ece"] - elo) < 0.02  # ECE's bootstrap is biased up; it is near
    with pytest.raises(ValueError):
        evaluate("choice", KINDS["choice"], np.zeros((0, 4)), [])


def test_labels_are_read_as_people_write_them():
    noul = Question("q", "noul", ("true", "false"), "blink.q", ())
    assert [label_index(noul, v) for v in ("Yes", "no", "TRUE", "0", 1, True, "1.0")] == [0, 1, 0, 1, 0, 0, 0]
    assert "not true/false" in label_index(noul, "maybe") and label_index(noul, "") == "no label"
    assert label_index(noul, float("nan")) == "no label" and label_index(noul, None) == "no label"
    score = Question("s", "score", ("0", "1", "2"), "blink.s", ("blink.s.p.0", "blink.s.p.1", "blink.s.p.2"))
    assert label_index(score, "2") == 2 and label_index(score, 1) == 1 and "a level 0-2" in label_index(score, "3")
    assert label_index(score, 2.0) == 2 and "'1.5' is not one of the options" in label_index(score, 1.5)
    choice = Question("c", "choice", ("billing", "technical"), "blink.c", ("blink.c.p.billing", "blink.c.p.technical"))
    assert label_index(choice, " technical ") == 1 and "'sales' is not one of the options" in label_index(
        choice, "sales"
    )


def test_the_page_stands_alone_and_escapes_what_the_table_named():
    """The HTML report: three charts per question, no script, nothing fetched, the names a table gave escaped."""
    from html.parser import HTMLParser

    hostile = "<script>alert(1)</script>"
    q = Question(hostile, "choice", ("a&b", "<i>"), "x", ("x.p.a&b", "x.p.<i>"))
    p, y = sample("noul", 50, 1, 0.7)
    rows = [{"x.p.a&b": a, "x.p.<i>": b, "truth": ["a&b", "<i>"][t], "err": ""} for (a, b), t in zip(p, y)]
    rows.append({"err": "422: the state is empty"})
    report = report_of(rows, [q], {hostile: "truth"}, "err") | {"table": "t.csv", "model": "demo"}
    html = page(report)

    class Tags(HTMLParser):
        seen: list = []

        def handle_starttag(self, tag, attrs):
            self.seen.append((tag, dict(attrs)))

    tags = Tags()
    tags.feed(html)
    names = [tag for tag, _ in tags.seen]
    assert names.count("svg") == 3 and names.count("figure") == 3 and "script" not in names
    assert not any(k in ("src", "href") or "url(" in str(v) for _, attrs in tags.seen for k, v in attrs.items())
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "a&amp;b" in html and "<i>" not in html
    assert "1 of 51 rows not counted" in html


@pytest.mark.parametrize(
    ("given", "words"),
    [
        (["refund"], "write it QUESTION=COLUMN"),
        (["nope=truth"], "no question 'nope'"),
        (["refund=missing"], "no column 'missing'"),
        (["refund=text"], "is a state column"),
        (["refund=truth", "refund=truth2"], "labelled twice"),
    ],
)
def test_a_label_that_cannot_be_read_is_refused_in_words(given, words):
    with pytest.raises(StartupError, match=words):
        parse_labels(given, QUESTIONS, ["text", "truth", "truth2"], ["text"])


@pytest.mark.parametrize(
    "extra, words",
    [
        (("--alpha", "0.1"), "need --label"),
        (("--label", "refund=truth", "--alpha", "0"), "alpha is the share of certified answers"),
        (("--label", "refund=truth", "--delta", "1"), "delta is the chance the guarantee fails"),
        (("--label", "refund=truth", "--alpha", "nan"), "alpha is the share"),
    ],
)
def test_alpha_and_delta_are_refused_before_the_model_loads(tmp_path, extra, words):
    table = tmp_path / "t.csv"
    table.write_text("text,truth\nhello,yes\n", encoding="utf-8")
    (tmp_path / "q.json").write_text(json.dumps(QUESTIONS), encoding="utf-8")
    argv = ["--table", str(table), "--state-column", "text", "--questions", str(tmp_path / "q.json")]
    assert words in refusal(*argv, "-o", str(tmp_path / "out.csv"), *extra)


@pytest.mark.e2e
def test_run_batch_label_writes_a_report_scikit_learn_agrees_with(tmp_path, demo_root):
    rows = tickets(30, seed=3)
    for i, row in enumerate(rows):
        row["refund_truth"] = ["yes", "no", "TRUE", "0"][i % 4]
        row["team_truth"] = ["billing", "technical"][i % 2]
        row["anger_truth"] = str(i % 3)
    rows[4]["refund_truth"], rows[5]["refund_truth"], rows[6]["team_truth"] = "maybe", "", "sales"
    rows[7]["anger_truth"], rows[8]["text"] = "7", ""  # an empty state: an error row, not counted
    table, out = tmp_path / "tickets.csv", tmp_path / "labelled.csv"
    with open(table, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    (tmp_path / "q.json").write_text(json.dumps(QUESTIONS), encoding="utf-8")
    labels = ("--label", "refund=refund_truth", "--label", "team=team_truth", "--label", "anger=anger_truth")
    done = run_table(demo_root, table, tmp_path / "q.json", out, *labels)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "evaluated against the labels" in done.stdout and "refund: n=27" in done.stdout, done.stdout
    assert done.stdout.count("fitted to these labels (5-fold): ") == 3, done.stdout
    report = json.loads((tmp_path / "labelled.report.json").read_text())
    assert (tmp_path / "labelled.report.html").read_text().count("<svg") == 9
    assert report["rows"] == 30 and report["model"] == "demo" and report["weights"]
    with open(out, newline="", encoding="utf-8") as fh:
        written = list(csv.DictReader(fh))
    expected_unusable = {"refund": {5, 6, 9}, "team": {7, 9}, "anger": {8, 9}}  # row numbers from 1
    for qid, options in (("refund", ["true", "false"]), ("team", ["billing", "technical"]), ("anger", ["0", "1", "2"])):
        r = report["questions"][qid]
        assert {u["row"] for u in r["unusable_rows"]} == expected_unusable[qid], r["unusable_rows"]
        used = [(n, row) for n, row in enumerate(written, start=1) if n not in expected_unusable[qid]]
        if qid == "refund":
            p = np.array([[float(row["blink.refund"]), 1 - float(row["blink.refund"])] for _, row in used])
            y = np.array([0 if row["refund_truth"].lower() in ("yes", "true", "1") else 1 for _, row in used])
        else:
            p = np.array([[float(row[f"blink.{qid}.p.{o}"]) for o in options] for _, row in used])
            y = np.array([options.index(row[f"{qid}_truth"]) for _, row in used])
        judge = sklearn_figures(QUESTIONS[qid]["type"], p, y)
        assert r["n"] == len(used) and r["confusion"] == judge["confusion"]
        for name in ("accuracy", "macro_f1", "nll", "brier"):
            assert abs(r[name] - judge[name]) <= 1e-9, (qid, name)
        refit = cross_validate(p, y)  # the side-by-side fit, done again from the table: the same choice
        assert r["fitted"]["kept"] == refit["kept"] and r["fitted"]["folds"] == 5
        for method, value in refit["cv_nll"].items():
            assert abs(r["fitted"]["cv_nll"][method] - value) <= 1e-6, (qid, method)
        assert set(r["fitted"]["cross_validated"]) == {"accuracy", "macro_f1", "nll", "brier", "ece", "ece_equal_mass"}
    # a finished run asked again writes the report again, deciding nothing; labels need a table
    (tmp_path / "labelled.report.json").unlink()
    again = run_table(demo_root, table, tmp_path / "q.json", out, *labels[:2], "--alpha", "0.5", "--delta", "0.2")
    assert again.returncode == 0 and "complete already" in again.stdout, again.stderr[-2000:]
    assert "certified at alpha 0.5, delta 0.2: " in again.stdout, again.stdout
    reported = json.loads((tmp_path / "labelled.report.json").read_text())
    assert list(reported["questions"]) == ["refund"] and "held out" in reported["held_out"]
    r = reported["questions"]["refund"]
    assert r["certificate"]["alpha"] == 0.5 and r["certificate"]["delta"] == 0.2
    used = [row for n, row in enumerate(written, start=1) if n not in expected_unusable["refund"]]
    p_true = np.array([float(row["blink.refund"]) for row in used])
    truth = np.array([row["refund_truth"].lower() in ("yes", "true", "1") for row in used])
    judge = certify(np.maximum(p_true, 1 - p_true), (p_true >= 0.5) == truth, 2, alpha=0.5, delta=0.2)
    assert {k: r["certificate"][k] for k in judge} == judge  # counts and a grid point: exact, from one table
    lines = tmp_path / "in.jsonl"
    lines.write_text("{}\n", encoding="utf-8")
    refused = run_batch(demo_root, "-i", str(lines), "-o", str(tmp_path / "o.jsonl"), *labels[:2], timeout=120)
    assert refused.returncode == 1 and "--label evaluates a table" in refused.stderr
    # a JSONL table named like the report its output would get is never written over
    named = tmp_path / "labelled.report.json"
    named.write_text(json.dumps({"text": "hi", "refund_truth": "yes"}) + "\n", encoding="utf-8")
    kept = named.read_text()
    over = run_table(demo_root, named, tmp_path / "q.json", tmp_path / "labelled.jsonl", *labels[:2])
    assert over.returncode == 1 and "write its report over the input" in over.stderr and named.read_text() == kept
