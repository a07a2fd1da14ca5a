"""Tasks (blink.tasks.task_file, blink.tasks.served): a name is a file name and nothing more; a task file is read back
whole or refused naming its fault, and bound to its weights and answer settings; a request's questions other than its
task's are named at their first difference. End to end on the demo model: `python -m blink task fit` on a labelled
table (one question's labels the model's own top answers, one's at random), then served — each answer equal to the
same request's plain answer with the task's fit applied by hand, certified exactly where the certificate says."""

from __future__ import annotations

import csv
import json
import re

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from blink.errors import BlinkError, StartupError
from blink.tasks.fit import apply
from blink.tasks.labelled import fitted
from blink.tasks.served import TaskBook, served_probabilities
from blink.tasks.task_file import make, name_problem, read, served_as, version_of
from helpers.batch import QUESTIONS, refusal, tickets

WEIGHTS = "sha256:" + "ab" * 32
SERVED = {"temperatures": {}, "levels": {}}
ANSWERS = {"x_order": "fixed", "x_calibration": "fitted", "prior_states": ["N/A", "", "[MASK]"]}


def synthetic_task(name: str = "tickets") -> dict:
    """A task made as `task fit` makes one, from an evaluation of answers whose labels follow them."""
    rng = np.random.default_rng(3)
    p_true = rng.uniform(0.02, 0.98, 300)
    labels = (rng.random(300) >= p_true).astype(int)  # option 0 ("true") with probability p_true
    p = np.stack([p_true, 1 - p_true], axis=1)
    report = {
        "questions": {
            "refund": {
                "type": "noul",
                "options": ["true", "false"],
                "fitted": fitted("noul", ["true", "false"], p, labels),
            }
        }
    }
    return make(name, QUESTIONS, report, {"weights": WEIGHTS, "calibration": SERVED, "answers": ANSWERS})


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=70))
def test_a_task_name_is_a_file_name_and_nothing_more(name):
    if name_problem(name) is None:
        assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", name) and ".." not in name, name
    else:
        assert "is not one" in name_problem(name)


@pytest.mark.parametrize("name", ["../etc", "a/b", "a\\b", "", "x" * 65, "tickets\n", ".hidden", "a..b", 7, None])
def test_names_with_path_characters_or_past_the_bound_are_refused(name):
    assert name_problem(name) is not None


def test_a_task_file_is_read_back_whole(tmp_path):
    task = synthetic_task()
    path = tmp_path / "tickets.task.json"
    path.write_bytes(orjson.dumps(task))
    assert read(str(path)) == json.loads(path.read_text())
    assert task["fitted"]["refund"]["certificate"]["certify_rows"] == 120  # 40% set aside: fit and certify apart
    assert set(task["fitted"]) == {"refund"} and len(task["version"]) == 12


def edited(task: dict, change, *, keep_version: bool = True) -> dict:
    task = json.loads(json.dumps(task))
    change(task)
    if not keep_version:
        task["version"] = version_of(task)
    return task


@pytest.mark.parametrize(
    ("change", "resealed", "words"),
    [
        (lambda t: t.update(format="blink-calibration"), False, "not a blink task"),
        (lambda t: t.update(format_version=2), False, "format_version 2"),
        (lambda t: t.pop("weights"), False, "it has no weights"),
        (lambda t: t.update(name="../x"), True, "is not one"),
        (lambda t: t["fitted"]["refund"]["params"].update(temperature=0.5), False, "edited after it was fitted"),
        (lambda t: t["fitted"]["refund"]["params"].update(temperature=-1), True, "positive number"),
        (lambda t: t["fitted"]["refund"]["params"].update(bias=[0.1]), True, "one number per option"),
        (lambda t: t["fitted"]["refund"].update(kept="isotonic"), True, "kept must be one of"),
        (lambda t: t["fitted"]["refund"]["certificate"].update(threshold=1.5), True, "threshold"),
        (lambda t: t["fitted"].update(nope=t["fitted"]["refund"]), True, "does not ask"),
    ],
)
def test_a_task_file_that_is_not_whole_is_refused_naming_its_fault(tmp_path, change, resealed, words):
    path = tmp_path / "t.task.json"
    path.write_bytes(orjson.dumps(edited(synthetic_task(), change, keep_version=not resealed)))
    with pytest.raises(StartupError, match=re.escape(words)):
        read(str(path))
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(StartupError, match="not JSON"):
        read(str(path))


def test_a_task_is_bound_to_its_weights_and_answer_settings(tmp_path):
    path = tmp_path / "t.task.json"
    path.write_bytes(orjson.dumps(synthetic_task()))
    served = served_as({**SERVED, "source": "/elsewhere/calibration.json", "loaded": False}, ANSWERS)
    assert TaskBook.load([str(path)], WEIGHTS, served).listing()[0]["name"] == "tickets"  # a file's path is no matter
    refusals = [
        ("sha256:" + "cd" * 32, served, "fitted on weights sha256:abab"),
        (WEIGHTS, served_as({"temperatures": {"noul": 1.3}}, ANSWERS), "served with calibration"),
        (WEIGHTS, served_as(SERVED, {**ANSWERS, "prior_states": ["N/A"]}), "served with answers"),
    ]
    for weights, other, words in refusals:
        with pytest.raises(StartupError, match=re.escape(words)):
            TaskBook.load([str(path)], weights, other)
    with pytest.raises(StartupError, match="two task files name the task 'tickets'"):
        TaskBook.load([str(path), str(path)], WEIGHTS, served)


@pytest.mark.parametrize(
    ("questions", "loc", "words"),
    [
        ({**QUESTIONS, "extra": {"type": "noul", "instructions": "?"}}, ["extra"], "extra is not one of them"),
        ({k: v for k, v in QUESTIONS.items() if k != "anger"}, ["anger"], "anger is missing"),
        (
            {**QUESTIONS, "team": {**QUESTIONS["team"], "criteria": {"billing": "Charges", "tech": None}}},
            ["team", "criteria", "technical"],
            "team.criteria.technical is missing",
        ),
        (
            {**QUESTIONS, "anger": {**QUESTIONS["anger"], "criteria": ["Calm", "Angry", "Very angry"]}},
            ["anger", "criteria", 1],
            'anger.criteria.1 is "Angry", the task\'s is "Frustrated"',
        ),
    ],
)
def test_questions_other_than_the_tasks_are_named_at_their_first_difference(questions, loc, words):
    book = TaskBook({"tickets": synthetic_task()})
    with pytest.raises(BlinkError) as refused:
        book.resolve({"state": "hi", "x_task": "tickets", "questions": questions})
    assert refused.value.status == 422 and refused.value.loc == ["body", "questions", *loc]
    assert words in refused.value.message
    body, task = book.resolve({"state": "hi", "x_task": "tickets"})
    assert body["questions"] == QUESTIONS and task["name"] == "tickets"
    assert book.resolve({"state": "hi", "x_task": "tickets", "questions": QUESTIONS})[0]["questions"] == QUESTIONS


@pytest.mark.e2e
def test_a_task_fitted_on_a_table_then_served(tmp_path, engine, demo_dir):
    """`task fit` on 150 rows: `team` labelled with the model's own top answers (every held-out answer right: certified
    down to the grid's lowest point at alpha 0.1), `refund` at random (nothing certified), `anger` not labelled. Served,
    each answer is the plain answer with the fit applied (<= 1e-9) and says what applied and whether it is certified."""
    from blink.__main__ import main
    from blink.server import ServedModel, build_chat_engine, build_context, create_app
    from blink.settings import Settings

    def client(**knobs):
        s = Settings(model=str(demo_dir), **knobs)
        ctx = build_context(s, ServedModel(engine.loaded, engine, build_chat_engine(s, engine.loaded)), warmup=False)
        key = {"Authorization": f"Bearer {s.api_key}"} if s.api_key else {}
        return TestClient(create_app(ctx), raise_server_exceptions=False, headers=key)

    rows = tickets(150, seed=8)
    rng = np.random.default_rng(8)
    with client() as plain:
        answers = [decide(plain, {"state": r["text"], "questions": QUESTIONS})["answers"] for r in rows]
        no_tasks = plain.post("/v1/systemone", json={"state": "hi", "x_task": "tickets"})
        assert no_tasks.status_code == 422 and "serves no tasks" in no_tasks.json()["error"]
        open_server = plain.get("/v1/tasks")  # no key: a task's report is never shown
        assert open_server.status_code == 404 and "only behind an API key" in open_server.json()["error"]["message"]
    for row, a in zip(rows, answers, strict=True):
        row["team_truth"] = a["team"]["choice"]
        row["refund_truth"] = ["yes", "no"][rng.integers(2)]
    table, questions = tmp_path / "tickets.csv", tmp_path / "q.json"
    with open(table, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    questions.write_text(json.dumps(QUESTIONS), encoding="utf-8")
    argv = ["task", "fit", "tickets", "--model", str(demo_dir), "--table", str(table), "--state-column", "text"]
    labels = ["--label", "team=team_truth", "--label", "refund=refund_truth", "--alpha", "0.1"]
    with pytest.raises(SystemExit) as done:
        main([*argv, "--questions", str(questions), *labels, "-o", str(tmp_path / "out.csv"), "--quiet"])
    assert done.value.code == 0
    task = read(str(tmp_path / "tickets.task.json"))
    team, refund = task["fitted"]["team"], task["fitted"]["refund"]
    assert (
        team["kept"] != "none" and team["certificate"]["threshold"] == 0.5 and team["certificate"]["certify_rows"] == 60
    ), team
    assert refund["certificate"]["threshold"] is None and "anger" not in task["fitted"]
    assert team["baseline"]["rows"] == 150 and abs(sum(team["baseline"]["mix"]) - 1) <= 1e-12
    assert (tmp_path / "out.report.json").exists()  # the evaluation it came from, written as run-batch writes it

    # the table decided as the task by run-batch: its answers are task fit's own (plain) ones with the fit applied,
    # within blink's 1e-6 across batch shapes, and each certified column says what its row's answer earned
    tasked = tmp_path / "tasked.csv"
    argv = ["run-batch", "--model", str(demo_dir), "--table", str(table), "--state-column", "text", "--quiet"]
    with pytest.raises(SystemExit) as done:
        main([*argv, "--task", str(tmp_path / "tickets.task.json"), "-o", str(tasked)])
    assert done.value.code == 0
    plain_rows, tasked_rows = read_csv(tmp_path / "out.csv"), read_csv(tasked)
    assert len(tasked_rows) == 150 and "blink.anger.certified" in tasked_rows[0]
    t = team["certificate"]["threshold"]
    columns = ["blink.team.p.billing", "blink.team.p.technical"]
    for plain_row, row in zip(plain_rows, tasked_rows, strict=True):
        by_hand = apply(team["params"], [[float(plain_row[c]) for c in columns]])[0]
        got = np.array([float(row[c]) for c in columns])
        assert np.max(np.abs(got - by_hand)) <= 1e-6 and row["blink.team.certified"] == str(got.max() >= t)
        assert row["blink.refund.certified"] == row["blink.anger.certified"] == "False"

    with client(tasks=(str(tmp_path / "tickets.task.json"),), api_key="sekret-key-123") as served:
        assert served.get("/healthz").json()["tasks"] == 1  # how many, and no more: a task is behind the key
        for row in rows[:12]:
            body = {"state": row["text"], "questions": QUESTIONS}
            given_plain = decide(served, body)["answers"]
            out = decide(served, {"state": row["text"], "x_task": "tickets", "x_abstain": True})
            facts = out["x_task"]
            assert facts["name"] == "tickets" and facts["version"] == task["version"]
            for qid, f in task["fitted"].items():
                p = served_probabilities(given_plain[qid], f["options"])
                q = apply(f["params"], [p])[0] if f["params"] else np.array(p)
                assert np.max(np.abs(np.array(served_probabilities(out["answers"][qid], f["options"])) - q)) <= 1e-9
                threshold = f["certificate"]["threshold"]
                certified = threshold is not None and q.max() >= threshold
                assert facts["questions"][qid] == {"applied": f["kept"], "certified": certified, "threshold": threshold}
            assert facts["questions"]["team"]["certified"] and not facts["questions"]["refund"]["certified"]
            assert facts["abstained"] == ["refund", "anger"] and out["answers"]["anger"] == given_plain["anger"]
        listed = served.get("/v1/tasks").json()["data"]
        assert [(t["name"], t["version"], t["certified"]["team"]) for t in listed] == [
            ("tickets", task["version"], 0.5)
        ]
        shown = served.get("/v1/tasks/tickets").json()
        assert shown["fitted"] == task["fitted"] and shown["monitor"]["team"]["answers"] == 12
        assert served.get("/v1/tasks/nope").status_code == 404
        assert TestClient(served.app).get("/v1/tasks").status_code == 401  # without the key
        scraped = served.get("/metrics").text
        counted = re.findall(
            r'blink_task_answers_total\{option="(\w+)",question="team",task="tickets"\} (\S+)', scraped
        )
        assert sum(float(n) for _, n in counted) == 12 and {o for o, _ in counted} == {"billing", "technical"}, scraped
        assert 'blink_task_drift_alerting{question="refund",signal="confidence",task="tickets"}' in scraped
        # the same through /v1/decisions' System One shape; without x_abstain nothing is marked abstained
        again = decide(served, {"state": rows[0]["text"], "x_task": "tickets"}, route="/v1/decisions")
        assert "abstained" not in again["x_task"] and again["x_task"]["questions"]["team"]["certified"]
        openai_shape = {"model": "demo", "input": "hi", "questions": [{"type": "predicate", "instructions": "?"}]}
        said = served.post("/v1/decisions", json={**openai_shape, "x_task": "tickets"})
        assert said.status_code == 400 and "not yet in OpenAI's" in said.json()["error"]["message"], said.text
        gemini = {"input": "hi", "questions": {"q": {"type": "noul", "instructions": "?"}}, "x_task": "tickets"}
        said = served.post("/v1beta/decisions", json=gemini)  # an unknown field there, as every other
        assert said.status_code == 400 and "unknown field `x_task`" in said.text, said.text
        refusals = [
            ({"x_task": "nope"}, 404, 'no task named "nope"; the tasks: tickets'),
            ({"x_task": ["tickets"]}, 422, "`x_task` must be a task's name"),
            ({"x_task": "tickets", "x_abstain": "yes"}, 422, "`x_abstain` must be true or false"),
            ({"x_abstain": True, "questions": QUESTIONS}, 422, "`x_abstain` needs `x_task`"),
            (
                {"x_task": "tickets", "x_calibration": "raw"},
                422,
                'fitted on answers served with x_calibration "fitted"',
            ),
            ({"x_task": "tickets", "questions": {"team": QUESTIONS["team"]}}, 422, "refund is missing"),
        ]
        for extra, status, words in refusals:
            refused = served.post("/v1/systemone", json={"state": "hi", **extra})
            assert refused.status_code == status and words in refused.json()["error"], refused.text


def test_run_batch_task_is_refused_before_the_model_loads_where_it_cannot_run(tmp_path):
    table, task, other = tmp_path / "t.csv", tmp_path / "t.task.json", tmp_path / "q.json"
    table.write_text("text\nhello\n", encoding="utf-8")
    task.write_bytes(orjson.dumps(synthetic_task()))
    other.write_text(json.dumps(QUESTIONS), encoding="utf-8")
    argv = ["--table", str(table), "--state-column", "text", "-o", str(tmp_path / "out.csv")]
    assert "leave out --questions" in refusal(*argv, "--task", str(task), "--questions", str(other))
    assert "not a blink task" in refusal(*argv, "--task", str(other))
    assert "on one machine (not --ray)" in refusal(*argv, "--task", str(task), "--ray", "local")
    lines = ["-i", str(table), "-o", str(tmp_path / "out.jsonl")]
    assert "decides a table (--table)" in refusal(*lines, "--task", str(task))


def read_csv(path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def decide(client, body: dict, route: str = "/v1/systemone") -> dict:
    answered = client.post(route, json=body)
    assert answered.status_code == 200, answered.text[:500]
    return answered.json()


def test_certification_is_withheld_while_the_traffic_has_drifted_when_asked():
    from transformers.decision import Question

    task = synthetic_task()
    task["fitted"]["refund"]["certificate"]["threshold"] = 0.5  # every answer certified while nothing alarms
    question = [Question("refund", "noul", "?", ["true", "false"], ["true", "false"], [None, None])]
    answer = {"refund": {"type": "noul", "noul": 0.9}}
    for suspend in (False, True):
        book = TaskBook({"tickets": task}, suspend=suspend)
        assert book.answer(task, answer, question, abstain=True)[1]["questions"]["refund"]["certified"]
        monitor = book.monitors["tickets"]["refund"]
        monitor.cusum = monitor.cusum_line + 5  # as a run of unsure answers leaves it
        _, fact = book.answer(task, answer, question, abstain=True)
        assert fact["questions"]["refund"]["certified"] is not suspend
        assert fact["abstained"] == (["refund"] if suspend else [])
        if suspend:
            assert "drifted (confidence)" in fact["questions"]["refund"]["suspended"]
