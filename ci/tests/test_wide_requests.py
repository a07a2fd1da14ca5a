"""The default limits at their most generous: 1,000 questions on System One's and Gemini's wires, 400 on OpenAI's
Decisions wire (its documented maximum) and a 255-level score question, answered under default settings, each
answer equal (within 1e-6) to the same question asked alone on the same wire; past the defaults, each wire's 4xx
naming the limit."""

from __future__ import annotations

import httpx
import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

STATE = "Order 5521: the parcel arrived nine days late, the box was crushed and the charger is missing. " * 5
WIDE = [f"Level {i}: {'barely' if i < 128 else 'clearly'} late by {i} hours" for i in range(255)]
TOLERANCE = 1e-6


def question(i: int) -> dict:
    """Question `i` in System One's shape (~30 tokens each): mostly yes/no, some choices and scores, and one score
    of 255 levels."""
    text = f"Question {i}: does the customer say the parcel arrived {i} days late, or describe something else?"
    if i == 7:
        return {"type": "score", "instructions": "How late was it?", "criteria": WIDE}
    if i % 10 == 3:
        return {"type": "choice", "instructions": text, "criteria": {"shipping": None, "billing": None, "other": None}}
    if i % 10 == 5:
        return {"type": "score", "instructions": text, "criteria": ["None", "A little", "Some", "A lot", "All"]}
    return {"type": "noul", "instructions": text}


def systemone_numbers(answer: dict) -> dict:
    return {"p": answer["noul"]} if answer["type"] == "noul" else dict(answer["probabilities"])


def openai_question(q: dict, name: str) -> dict:
    if q["type"] == "noul":
        return {"type": "predicate", "name": name, "instructions": q["instructions"]}
    if q["type"] == "choice":
        return {
            "type": "choice",
            "name": name,
            "instructions": q["instructions"],
            "choices": [{"value": v} for v in q["criteria"]],
        }
    return {
        "type": "score",
        "name": name,
        "instructions": q["instructions"],
        "levels": [{"label": label} for label in q["criteria"]],
    }


def openai_numbers(answer: dict) -> dict:
    if answer["type"] == "predicate":
        return {"p": answer["probability"]}
    return {str(p["value"]): p["probability"] for p in answer["probabilities"]}


WIRES = {
    # wire: (path, how many questions, body of {id: question}, its answers by id as numbers)
    "systemone": (
        "/v1/systemone",
        1000,
        lambda qs: {"state": STATE, "questions": qs},
        lambda body: {qid: systemone_numbers(a) for qid, a in body["answers"].items()},
    ),
    "gemini": (
        "/v1beta/decisions",
        1000,
        lambda qs: {"model": "models/demo", "input": STATE, "questions": qs},
        lambda body: {qid: systemone_numbers(a) for qid, a in body["answers"].items()},
    ),
    "openai": (
        "/v1/decisions",
        400,
        lambda qs: {"model": "demo", "input": STATE, "questions": [openai_question(q, qid) for qid, q in qs.items()]},
        lambda body: {a["name"]: openai_numbers(a) for a in body["answers"]},
    ),
}


@pytest.mark.parametrize("wire", list(WIRES))
def test_the_most_questions_a_wire_documents_each_answer_as_alone(server, wire):
    path, n, make, numbers = WIRES[wire]
    questions = {f"q{i}": question(i) for i in range(n)}
    with httpx.Client(base_url=server, timeout=600) as http:
        together = http.post(path, json=make(questions))
        assert together.status_code == 200, together.text[:500]
        answers = numbers(together.json())
        assert list(answers) == list(questions)
        assert len(answers["q7"]) == 255  # the 255-level score, every level read
        # each of a spread of them (every type, the first, the last, the wide one) asked alone on the same wire
        for qid in ["q0", "q3", "q5", "q7", *[f"q{i}" for i in range(11, n, n // 12)], f"q{n - 1}"]:
            alone = http.post(path, json=make({qid: questions[qid]}))
            assert alone.status_code == 200, alone.text[:300]
            want = numbers(alone.json())[qid]
            assert want.keys() == answers[qid].keys(), qid
            worst = max(abs(answers[qid][k] - v) for k, v in want.items())
            assert worst <= TOLERANCE, (wire, qid, worst)


@pytest.mark.parametrize("wire", list(WIRES))
def test_past_the_defaults_each_wire_refuses_naming_the_limit(server, wire):
    path, _, make, _ = WIRES[wire]
    with httpx.Client(base_url=server, timeout=120) as http:
        many = http.post(path, json=make({f"q{i}": question(i) for i in range(1001)}))
        assert 400 <= many.status_code < 500 and "at most 1000" in many.text, many.text[:300]
        wide = {"type": "score", "instructions": "?", "criteria": [f"{i}" for i in range(256)]}
        levels = http.post(path, json=make({"q0": wide}))
        assert 400 <= levels.status_code < 500 and "at most 255" in levels.text, levels.text[:300]


@pytest.mark.parametrize("wire", list(WIRES))
def test_past_the_request_token_budget_each_wire_refuses_naming_it(server, wire):
    """400 questions of ~180 tokens each run ~72k tokens, past the default budget of 65,536 per request: refused with
    the wire's 4xx naming the budget, nothing truncated, and the server keeps serving."""
    path, _, make, _ = WIRES[wire]
    long = " ".join(f"word{i}" for i in range(90))
    questions = {f"q{i}": {"type": "noul", "instructions": f"Question {i}: {long}?"} for i in range(400)}
    with httpx.Client(base_url=server, timeout=300) as http:
        r = http.post(path, json=make(questions))
        assert 400 <= r.status_code < 500 and "65536 per request" in r.text, r.text[:300]
        assert http.post(path, json=make({"q0": question(0)})).status_code == 200
