"""Answers in TypeSafe's exact shapes, from option probabilities.

The formulas are `transformers.decision.Question.answer`'s (noul = P(true); choice confidence
(p_max - 1/n)/(1 - 1/n); score = sum i*p_i with the mean-absolute-deviation confidence); this module only
puts the keys in the live API's order and guarantees a clean distribution.
"""

from __future__ import annotations

import math

from transformers.decision import Question

from blink.errors import EngineFailure

FLOOR = 1e-300  # a probability below this is taken as this in the prior's division (no log of 0, no division by 0)

# the live API's key order per answer type
KEY_ORDER = {
    "noul": ("type", "noul"),
    "choice": ("type", "choice", "confidence", "probabilities"),
    "score": ("type", "score", "confidence", "legend", "probabilities"),
}


def softmax(logits: list[float]) -> list[float]:
    """In double precision, so the probabilities sum to 1 within 1e-12."""
    if not all(math.isfinite(x) for x in logits):
        raise EngineFailure("the model produced non-finite scores", kind="non_finite")
    top = max(logits)
    exps = [math.exp(x - top) for x in logits]
    total = math.fsum(exps)
    return [e / total for e in exps]


def probabilities(rows: list[list[float]], temperature: float = 1.0) -> list[float]:
    """The option probabilities of one question from its readings (one row of label logits per reading, every
    row in the question's option order): the mean over readings of softmax(logits / T)."""
    dists = [softmax([x / temperature for x in row]) for row in rows]
    if len(dists) == 1:  # one reading (no rotation): its distribution is the mean, exactly
        return dists[0]
    return [math.fsum(column) / len(dists) for column in zip(*dists)]


def normalized(p: list[float], prior: list[float]) -> list[float]:
    """`p` divided by `prior`, renormalized (in log space, so no option's tiny prior overflows the sum)."""
    logs = [math.log(max(a, FLOOR)) - math.log(max(c, FLOOR)) for a, c in zip(p, prior, strict=True)]
    top = max(logs)
    weights = [math.exp(x - top) for x in logs]
    total = math.fsum(weights)
    return [w / total for w in weights]


def answer(question: Question, logits: list[float]) -> dict:
    """The System One answer to `question` from its label logits (temperature already applied)."""
    return answer_from_probabilities(question, softmax(logits))


def answer_from_probabilities(question: Question, probabilities: list[float]) -> dict:
    """The System One answer to `question` from its option probabilities (in its option order)."""
    raw = question.answer(probabilities)
    return {key: raw[key] for key in KEY_ORDER[question.type]}


def aligned(question: Question, reading: Question, row: list[float]) -> list[float]:
    """A reading's label logits in the question's own option order."""
    if reading.options == question.options:
        return row
    where = {option: i for i, option in enumerate(reading.options)}
    return [row[where[option]] for option in question.options]


def rows_by_question(questions: list[Question], readings: list[Question], logits: list[list[float]]) -> dict:
    """Every reading's label logits, grouped by question id, each row in its question's option order."""
    rows: dict[str, list[list[float]]] = {q.name: [] for q in questions}
    by_name = {q.name: q for q in questions}
    for reading, row in zip(readings, logits, strict=True):
        rows[reading.name].append(aligned(by_name[reading.name], reading, row))
    return rows


def read_answers(
    questions: list[Question],
    readings: list[Question],
    logits: list[list[float]],
    temperatures: dict,
    prior: dict | None = None,
) -> dict:
    """Answers keyed by question id, in request order, from every reading's label logits at each question's
    temperature (`temperatures`: question id -> T, 1 where absent); with `prior` (question id
    -> its content-free prior, blink.decide.prior), each question's probabilities divided by its prior, renormalized."""
    rows = rows_by_question(questions, readings, logits)
    out = {}
    for q in questions:
        p = probabilities(rows[q.name], temperatures.get(q.name, 1.0))
        out[q.name] = answer_from_probabilities(q, p if prior is None else normalized(p, prior[q.name]))
    return out
