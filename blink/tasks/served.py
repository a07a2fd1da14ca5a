"""Tasks served: a decision that names one (`"x_task": NAME`) gets the task's questions and its fit, and says per
question whether its answer is certified (blink.tasks.task_file).

The decision service calls `resolve` on a body before it is checked (the task's questions filled in, or the body's
own held to them) and `answer` on its answers (the fit applied, the certificate read). The book is handed to the
service by whoever builds it (blink.server), so the decision layer never imports this one.

A request may also ask `"x_abstain": true`: a question whose answer is not certified is then named in the response's
`x_task.abstained` (its probabilities still there) for a person to take; without it the answer only says
`certified: false`. The answers themselves keep their wire's shape, so every existing client reads them unchanged.
"""

from __future__ import annotations

import json

import orjson
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from blink.decide.answers import answer_from_probabilities
from blink.errors import InvalidRequest, NotFound
from blink.tasks.drift import Monitor
from blink.tasks.fit import apply
from blink.tasks.task_file import TaskError, bind, read

# the answer settings a task was fitted on, and the request fields that would change them
SETTINGS = {"x_calibration": "x_calibration", "x_order": "x_order"}


def unknown_task(name, served, loc=("body",)) -> NotFound:
    """The 404 for a task not served here, listing those that are (`served`: their names)."""
    known = ", ".join(sorted(served)) or "none are served here"
    return NotFound(f"no task named {json.dumps(name)[:80]}; the tasks: {known}", loc=loc, kind="task_not_found")


class TaskBook:
    """The tasks a server serves, by name, and each labelled question's drift monitor (blink.tasks.drift).
    `suspend`: while a question's monitor alarms, its answers are not certified (and say why)."""

    def __init__(self, tasks: dict[str, dict], suspend: bool = False):
        self.tasks = tasks
        self.suspend = suspend
        self.monitors = {
            name: {qid: Monitor(f["baseline"]) for qid, f in task["fitted"].items() if "baseline" in f}
            for name, task in tasks.items()
        }

    @classmethod
    def load(cls, paths, weights: str, served: dict, suspend: bool = False) -> TaskBook:
        """Each task file read and bound to these weights and answer settings (refused, naming the fault, else)."""
        tasks: dict[str, dict] = {}
        for path in paths:
            task = read(path)
            bind(task, weights, served)
            if task["name"] in tasks:
                raise TaskError(f"two task files name the task {task['name']!r}: serve one of them")
            tasks[task["name"]] = task
        return cls(tasks, suspend)

    def listing(self) -> list[dict]:
        return [{"name": t["name"], "version": t["version"], "questions": list(t["questions"])} for t in self]

    def __iter__(self):
        return iter(self.tasks.values())

    def resolve(self, body) -> tuple[dict, dict | None]:
        """The body to decide and the task it names (None: no `x_task`). Refused: an unknown task (404, listing the
        tasks), questions other than the task's (naming the first difference), settings it was not fitted with."""
        if not isinstance(body, dict) or "x_task" not in body:
            if isinstance(body, dict) and "x_abstain" in body:
                raise InvalidRequest("`x_abstain` needs `x_task`: only a task's answers are certified", loc=["body"])
            return body, None
        name = body["x_task"]
        if not isinstance(name, str):
            raise InvalidRequest(
                "`x_task` must be a task's name (a string)", loc=["body", "x_task"], kind="string_type"
            )
        task = self.tasks.get(name)
        if task is None:
            raise unknown_task(name, self.tasks, loc=["body", "x_task"])
        if not isinstance(body.get("x_abstain", False), bool):
            raise InvalidRequest("`x_abstain` must be true or false", loc=["body", "x_abstain"], kind="bool_type")
        for field, key in SETTINGS.items():
            fitted_with = task["served"]["answers"][key]
            if field in body and body[field] not in (fitted_with, "calibrated" if field == "x_calibration" else None):
                raise InvalidRequest(
                    f"task {name!r} was fitted on answers served with {field} {json.dumps(fitted_with)}: a request "
                    f"naming it may not ask for {json.dumps(body[field])[:80]}",
                    loc=["body", field],
                )
        if "questions" not in body:
            return {**body, "questions": task["questions"]}, task
        difference = first_difference(task["questions"], body["questions"], ["body", "questions"])
        if difference:
            where, why = difference
            raise InvalidRequest(f"task {name!r} asks its own questions: {why}", loc=where, kind="task_questions")
        return body, task

    def answer(self, task: dict, answers: dict, questions, abstain: bool) -> tuple[dict, dict]:
        """The answers with the task's fit applied, and the response's `x_task`: the name, the version, and per
        question what was applied, whether it is certified and at what threshold."""
        by_name = {q.name: q for q in questions}
        out, facts, abstained = {}, {}, []
        for qid, given in answers.items():
            f = task["fitted"].get(qid)
            if f is None:  # a question no label reached: served as it is, never certified
                out[qid], facts[qid] = given, {"applied": "none", "certified": False, "threshold": None}
            else:
                p = served_probabilities(given, f["options"])
                q = apply(f["params"], [p])[0].tolist() if f["params"] else p
                out[qid] = answer_from_probabilities(by_name[qid], q) if f["params"] else given
                facts[qid] = self._certified(task["name"], qid, f, q)
            if abstain and not facts[qid]["certified"]:
                abstained.append(qid)
        fact = {"name": task["name"], "version": task["version"], "questions": facts}
        if abstain:
            fact["abstained"] = abstained
        return out, fact

    def _certified(self, name: str, qid: str, f: dict, q: list[float]) -> dict:
        """One answer's fact (what was applied, certified or not, at what threshold), its monitor fed."""
        threshold = f["certificate"].get("threshold")
        top = max(q)
        fact = {"applied": f["kept"], "certified": threshold is not None and top >= threshold, "threshold": threshold}
        monitor = self.monitors[name].get(qid)
        if monitor is not None:
            monitor.add(q.index(top), top)
            if self.suspend and monitor.drifting and fact["certified"]:
                signals = " and ".join(s for s, on in monitor.alarming.items() if on)
                fact.update(certified=False, suspended=f"the traffic has drifted ({signals}): certification withheld")
        return fact

    def state(self, name: str) -> dict:
        """A task as `GET /v1/tasks/{name}` shows it: the file's content and each monitor's signals now."""
        monitors = {qid: m.state() for qid, m in self.monitors[name].items()}
        return {**self.tasks[name], "monitor": monitors}

    def collect(self):
        """Each monitor's signals for `/metrics` (a prometheus_client collector), read when scraped."""
        answers = CounterMetricFamily(
            "blink_task_answers", "Answers a task served, by option.", labels=LABELS + ["option"]
        )
        value = GaugeMetricFamily("blink_task_drift", "A drift signal's value now.", labels=[*LABELS, "signal"])
        line = GaugeMetricFamily("blink_task_drift_line", "A drift signal's alarm line.", labels=[*LABELS, "signal"])
        alarm = GaugeMetricFamily(
            "blink_task_drift_alerting", "1 while a signal is past its line.", labels=[*LABELS, "signal"]
        )
        for name, monitors in self.monitors.items():
            options_of = {qid: f["options"] for qid, f in self.tasks[name]["fitted"].items()}
            for qid, m in monitors.items():
                for option, count in zip(options_of[qid], m.answered.tolist(), strict=True):
                    answers.add_metric([name, qid, option], count)
                for signal, now, at in (("mix", m.distance, m.line), ("confidence", m.cusum, m.cusum_line)):
                    value.add_metric([name, qid, signal], now)
                    line.add_metric([name, qid, signal], at)
                    alarm.add_metric([name, qid, signal], float(m.alarming[signal]))
        yield from (answers, value, line, alarm)


LABELS = ["task", "question"]


def served_probabilities(answer: dict, options: list[str]) -> list[float]:
    """A System One answer's probabilities in the task's option order (a yes/no answer holds P(true) alone)."""
    if answer["type"] == "noul":
        return [answer["noul"], 1.0 - answer["noul"]]
    return [answer["probabilities"][o] for o in options]


def first_difference(want, got, where: list) -> tuple[list, str] | None:
    """Where `got` first differs from `want` (JSON values), and how."""
    if isinstance(want, dict) and isinstance(got, dict):
        for key in want:
            if key not in got:
                return [*where, key], f"{'.'.join(map(str, where[2:] + [key]))} is missing"
            found = first_difference(want[key], got[key], [*where, key])
            if found:
                return found
        extra = next((k for k in got if k not in want), None)
        if extra is not None:
            return [*where, extra], f"{'.'.join(map(str, where[2:] + [extra]))} is not one of them"
        return None
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        for i, (a, b) in enumerate(zip(want, got, strict=True)):
            found = first_difference(a, b, [*where, i])
            if found:
                return found
        return None
    if orjson.dumps(want) == orjson.dumps(got):
        return None
    label = ".".join(map(str, where[2:])) or "questions"
    return where, f"{label} is {json.dumps(got)[:80]}, the task's is {json.dumps(want)[:80]}"
