"""Answers in TypeSafe's exact shapes, from option probabilities.

The formulas are `transformers.decision.Question.answer`'s (noul = P(true); choice confidence
(p_max - 1/n)/(1 - 1/n); score = sum i*p_i with the mean-absolute-deviation confidence); this module only
puts the keys in the live API's order and guarantees a clean distribution.
"""

from __future__ import annotations

import math

from transformers.decision import Question

from .errors import EngineFailure

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


def answer(question: Question, logits: list[float]) -> dict:
    """The System One answer to `question` from its label logits (temperature already applied)."""
    return answer_from_probabilities(question, softmax(logits))


def answer_from_probabilities(question: Question, probabilities: list[float]) -> dict:
    """The System One answer to `question` from its option probabilities (in its option order)."""
    raw = question.answer(probabilities)
    return {key: raw[key] for key in KEY_ORDER[question.type]}
