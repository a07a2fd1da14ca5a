"""Option-order debiasing (`"x_order": "rotate"`) and the readout that turns readings into answers.

A label readout carries position bias: the model favours some slots (`A`, the last option, ...) whatever sits in
them. With `rotate`, a choice question of n options is read n times, once per cyclic rotation of its options, so
every option is read once at every position, and its probabilities (by option name) are averaged. The set of
rotations is the same whichever rotation of the options a request sends, so the answer is too.

Each rotation is just one more question prompt on the same state, so the executor's shared prefix (the state) is
prefilled once and a rotation costs only its suffix rows. noul and score are read once, as given: noul's option
order is the model's (`noul_options`), and a score's levels are ordered, so rotating them would change the question.

The readout is the same with or without rotation (blink.decide.answers.read_answers): every reading of a question
(one, or
n) gives its label logits, the calibration temperature of its type divides them, and the mean of their softmaxes is
the answer's distribution.
"""

from __future__ import annotations

from dataclasses import replace

from transformers.decision import DecisionConfig, Question
from transformers.decision.template_utils import DECISION_PROMPT
from transformers.utils.chat_template_utils import _get_template_variables

from blink.decide.prompts import PromptBuilder
from blink.decide.questions import Decision
from blink.errors import InvalidRequest
from blink.plan import Prompt, processed_tokens


def one_prompt_per_question(config: DecisionConfig) -> bool:
    """Rotations are extra question prompts, which needs a template that renders one question per prompt (a
    template reading all `questions` in one prompt would show every rotation to every other question)."""
    return "questions" not in _get_template_variables(config.chat_template or DECISION_PROMPT)


def rotated(raw: dict, shift: int) -> dict:
    options = list(raw["criteria"].items())
    return {**raw, "criteria": dict(options[shift:] + options[:shift])}


def rotations(
    builder: PromptBuilder, decision: Decision, images: dict | None, prompts: list[Prompt]
) -> tuple[list[Prompt], list, int]:
    """A decision's own `prompts` followed by each choice's rotations, in the executor's read order the question
    each read belongs to (as it was put in that prompt), and the tokens the executor runs for them all."""
    readings = list(decision.questions)
    if not one_prompt_per_question(builder.config):
        raise InvalidRequest(
            '`x_order` "rotate" needs a model whose template renders one question per prompt; '
            "this model's reads all questions in one prompt",
            loc=["body", "x_order"],
            kind="rotate_unsupported",
        )
    widest = max((len(q.options) for q in decision.questions if q.type == "choice"), default=1)
    for shift in range(1, widest):
        raw = {
            q.name: rotated(decision.raw_questions[q.name], shift)
            for q in decision.questions
            if q.type == "choice" and len(q.options) > shift
        }
        questions = [Question.from_request(name, question, builder.config) for name, question in raw.items()]
        prompts += builder.build(replace(decision, questions=questions, raw_questions=raw), images)
        readings += questions
    total = processed_tokens(prompts)
    if total > builder.limits.max_request_tokens:
        raise InvalidRequest(
            f'with `x_order` "rotate" (each choice read once per rotation of its options) the request needs {total} '
            f"tokens; this server's limit is {builder.limits.max_request_tokens} per request. Send fewer or shorter "
            "choice questions, or drop `x_order`.",
            loc=["body", "x_order"],
            kind="context_length_exceeded",
        )
    return prompts, readings, total
