"""A decision's steps: checked, planned into prompts (main process), scored (one GPU call), answered.

`DecisionPlanner` is the main-process side on plain CPU data: `check` refuses what can be refused without the
model's tokenizer having run (before the request is admitted), `plan` tokenizes under the limits (after it is
admitted), `answer` reads the scores. Scoring is the backend's (blink.backend): `Engine` is the planner with
blink's executor in this process, whose `score` takes plain data and returns plain data (`Scored`), so on ZeroGPU
it is wrapped in `@spaces.GPU` and crosses the process boundary by pickle, and a batcher hands it many requests
at once.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from blink.decide.answers import answer_from_probabilities, read_answers
from blink.decide.calibration import UNCALIBRATED, Calibration
from blink.decide.prior import DEFAULT_STATES, PriorCache, PriorPlan, check_states, plan_prior, priors
from blink.decide.prompts import PromptBuilder, decision_config_for
from blink.decide.questions import Decision, QuestionMemo, parse_decision, text_size
from blink.decide.rotation import one_prompt_per_question, rotations
from blink.decide.x_fields import MODES, uses_prior, uses_temperatures
from blink.errors import BlinkError, EngineFailure, InvalidRequest, StartupError
from blink.executor.core import Executor
from blink.executor.prompt_logprobs import prompt_logprobs
from blink.images.intake import ImageLimits, has_images, load_images, place_images
from blink.limits import Limits
from blink.memory import give_back_memory
from blink.model.loading import Loaded
from blink.plan import Prompt, PromptLogprobs, Scored, image_usage, tokens_at_least

if TYPE_CHECKING:
    from blink.decide.batching import OnItsWay

log = logging.getLogger("blink")

# A text decision this small is planned (rendered, tokenized) on the event loop: its plan costs ~0.1-0.3 ms here,
# less than the worker-thread hop it would otherwise take (~0.5 ms). Bigger ones, images and rotations go to a thread.
INLINE_PLAN_CHARS = 4096

# After a call over this many tokens the freed activations go back to the system: glibc would keep ~250 MB of a
# 32k-token pass otherwise (bench/stress/heap_retention.py); the trim costs milliseconds against a pass of seconds.
TRIM_AFTER_TOKENS = 8192

WARMUP = {
    "state": "Order 4471 arrived with a cracked screen. The customer attached photos and wants a replacement.",
    "questions": {
        "route": {
            "type": "choice",
            "instructions": "Which team should handle this?",
            "criteria": {
                "returns": "Damaged or wrong items",
                "billing": "Charges and refunds",
                "shipping": "Late or lost parcels",
            },
        },
        "urgent": {"type": "noul", "instructions": "Does this need a reply today?"},
        "tone": {
            "type": "score",
            "instructions": "How upset is the customer?",
            "criteria": ["Calm", "Annoyed", "Angry"],
        },
    },
}


@dataclass
class Checked:
    """A decision refused by nothing the planner can see before tokenizing: the body (images not yet decoded)
    and, for a text-only body, the parsed decision (an image body is parsed again once its images are placed)."""

    body: dict
    parts: dict
    decision: Decision | None
    inline: bool = False  # small enough to plan on the event loop (INLINE_PLAN_CHARS)
    # the request counted on its way to the batcher (blink.decide.batching.OnItsWay): its queue ends the count
    on_its_way: OnItsWay | None = None
    task: dict | None = None  # the task the body named (`x_task`), resolved by the service's task book


@dataclass
class Prepared:
    """A validated, tokenized decision: what the GPU call needs (`prompts`) and what the answers and the usage
    need."""

    decision: Decision
    prompts: list[Prompt]
    input_tokens: int
    image_usage: dict | None = None  # image_pixels, visual_tokens (image requests only)
    readings: list = field(default_factory=list)  # per read of `prompts`, its question (rotations included)
    # what calibration the answers get (blink.decide.x_fields.MODES), the server's default resolved
    mode: str = "fitted"
    prior: PriorPlan | None = None  # the content-free prompts, when the mode divides by the prior (blink.decide.prior)

    @property
    def prior_plans(self) -> list[list[Prompt]]:
        """The content-free plans still to score with this request (none without a prior, or when all are kept)."""
        return self.prior.plans if self.prior is not None else []


def failure(exc: Exception) -> BlinkError:
    """A forward pass's exception as the request's error (call it inside `except`: the traceback is logged)."""
    log.exception("forward pass failed")
    if isinstance(exc, BlinkError):
        return exc
    return EngineFailure(f"the model failed on this request: {type(exc).__name__}: {exc}")


class DecisionPlanner:
    """The main-process side of decisions for one model: check, plan, answer. Needs the tokenizer and templates
    only (no weights), so it also serves in front of vLLM replicas."""

    def __init__(
        self,
        loaded: Loaded,
        limits: Limits | None = None,
        image_limits: ImageLimits | None = None,
        image_layout: str = "inline",
        calibration: Calibration = UNCALIBRATED,
        order: str = "fixed",
        x_calibration: str = "fitted",
        prior_states: tuple[str, ...] = DEFAULT_STATES,
    ):
        self.loaded = loaded
        self.limits = limits or Limits()
        self.image_limits = image_limits or ImageLimits()
        self.image_layout = image_layout or "inline"
        self.tokenizer = loaded.tokenizer
        self.processor = loaded.processor
        self.config = decision_config_for(str(loaded.root), loaded.tokenizer)
        self.prompts = PromptBuilder(loaded.tokenizer, self.config, self.limits, loaded.processor)
        self.calibration = calibration
        self.order = order  # the server's default `x_order`
        if order == "rotate" and not one_prompt_per_question(self.config):
            raise StartupError("x_order rotate needs a model whose template renders one question per prompt")
        self.questions = QuestionMemo()  # questions seen before, parsed and validated once
        if x_calibration not in MODES:
            raise StartupError(f"x_calibration must be one of {', '.join(MODES)}, got {x_calibration!r}")
        self.x_calibration = x_calibration  # the server's default `x_calibration`
        try:
            self.prior_states = check_states(prior_states)
        except ValueError as error:
            raise StartupError(f"prior_states: {error}") from None
        self.priors = PriorCache()  # content-free label logits, by their prompts' exact tokens

    @property
    def accepts_images(self) -> bool:
        return self.processor is not None

    def check(self, body, parts: dict | None = None) -> Checked:
        """Everything refusable before tokenizing: the body's shape, its questions, the `x_` fields, images on a
        text-only model. Cheap whatever the body holds; runs before the request takes a place."""
        parts = parts or {}
        if not has_images(body, parts):
            decision = parse_decision(body, self.config, self.limits, self.questions)
            return Checked(body, parts, decision, inline=self.plans_inline(decision))
        if not self.accepts_images:
            raise InvalidRequest(
                "this server's model reads text only: images are not accepted",
                loc=["body", "assets"],
                kind="images_unsupported",
            )
        return Checked(body, parts, None)

    def plans_inline(self, decision: Decision) -> bool:
        if (decision.order or self.order) == "rotate":
            return False
        questions = decision.question_chars
        if questions is None:
            questions = text_size(decision.raw_questions, INLINE_PLAN_CHARS)
        size = text_size(decision.state, INLINE_PLAN_CHARS) + questions
        return size <= INLINE_PLAN_CHARS

    def plan(self, checked: Checked) -> Prepared:
        """The checked decision tokenized into what the GPU call needs, every count capped by the limits."""
        images, decision = None, checked.decision
        if decision is None:
            body, images, first = load_images(checked.body, checked.parts, self.image_limits)
            body = place_images(body, first, self.image_layout, list(images))
            # the state's length is checked where it is tokenized, with images standing as placeholders by now
            decision = parse_decision(body, self.config, self.limits, self.questions)
        prompts, tokens = self.prompts.counted(decision, images)
        readings = list(decision.questions)  # one read per question, unless each choice is read once per rotation
        rotate = (decision.order or self.order) == "rotate"
        if rotate:
            prompts, readings, tokens = rotations(self.prompts, decision, images, prompts)
        usage = image_usage(prompts, self.processor) if images else None
        if images:  # the decoded pictures are dropped now (the prompts hold the processed pixels)
            images = None
            give_back_memory()
        mode = decision.calibration or self.x_calibration
        prior = self.plan_prior(decision, rotate) if uses_prior(mode) else None
        return Prepared(decision, prompts, tokens, usage, readings, mode, prior)

    def plan_prior(self, decision: Decision, rotate: bool) -> PriorPlan:
        """The decision's questions asked about each content-free state, rendered (and rotated) exactly as the
        request's own; the prompts whose label logits are kept need no scoring."""

        def build(content_free: Decision) -> list[Prompt]:
            prompts = self.prompts.build(content_free)
            return rotations(self.prompts, content_free, None, prompts)[0] if rotate else prompts

        return plan_prior(build, decision, self.prior_states, self.priors)

    def prepare(self, body, parts: dict | None = None) -> Prepared:
        """`check` then `plan`, in this thread (tests, tools, warm-up)."""
        return self.plan(self.check(body, parts))

    def answer(self, prepared: Prepared, scores: list[list[list[float]]], prior_scored: list[Scored] = ()) -> dict:
        """Answers keyed by question id, in request order; `prior_scored`: the outcomes of `prepared.prior_plans`
        (scored with the request), when it has any."""
        if prepared.prior_plans:
            prepared.prior.fill(list(prior_scored), self.priors)
        logits = [row for prompt_scores in scores for row in prompt_scores]
        questions, prior = prepared.decision.questions, None
        temperatures = self.calibration.per_question(questions, not uses_temperatures(prepared.mode))[0]
        if prepared.prior is not None:
            prior = priors(questions, prepared.readings, prepared.prior.logits(), temperatures)
            prepared.prior.answers = {q.name: answer_from_probabilities(q, prior[q.name]) for q in questions}
        return read_answers(questions, prepared.readings, logits, temperatures, prior)

    def calibration_fact(self, prepared: Prepared) -> dict:
        """`{"applied", "temperatures"}`: what calibration this request's answers got, and `prior` (the states, the
        prior of every question in its answer's shape, the tokens run for it) when they were divided by it."""
        fact = self.calibration.fact(not uses_temperatures(prepared.mode), prepared.decision.questions)
        if prepared.prior is not None:
            fact["applied"] = True
            fact["prior"] = {
                "states": list(prepared.prior.states),
                "answers": prepared.prior.answers,
                "tokens": prepared.prior.tokens,
            }
        return fact


class Engine(DecisionPlanner):
    """The planner with blink's executor in this process: it scores too (the in-process backend, the Space's GPU
    worker, warm-up, tests)."""

    def __init__(
        self,
        loaded: Loaded,
        limits: Limits | None = None,
        image_limits: ImageLimits | None = None,
        image_layout: str = "inline",
        pass_cost_tokens: float | None = None,
        pass_cache_bytes: int | None = None,
        prefix_cache_bytes: int | None = None,
        prefix_block_tokens: int | None = None,
        calibration: Calibration = UNCALIBRATED,
        order: str = "fixed",
        x_calibration: str = "fitted",
        prior_states: tuple[str, ...] = DEFAULT_STATES,
    ):
        super().__init__(loaded, limits, image_limits, image_layout, calibration, order, x_calibration, prior_states)
        self.executor = Executor(
            loaded.model,
            pass_cost_tokens=pass_cost_tokens,
            pass_cache_bytes=pass_cache_bytes,
            prefix_cache_bytes=prefix_cache_bytes,
            prefix_block_tokens=prefix_block_tokens,
        )

    def score(self, plans: list[list[Prompt]], saves: bool = True) -> list[Scored]:
        """Scores many requests in one call, one `Scored` per plan: its scores or its own error (a failed batch
        is retried one request at a time, so one bad request doesn't fail the others). Never raises. `saves=False`:
        no state is saved in the prefix-state cache (bulk rows; saved ones are still read)."""
        start = time.perf_counter()
        try:
            scores, cached = self.executor.score_reusing(plans, saves)
            outcomes = [(s, None, c) for s, c in zip(scores, cached)]
        except Exception as exc:  # noqa: BLE001 - every request keeps its own outcome
            if len(plans) == 1:
                outcomes = [(None, failure(exc), 0)]
            else:
                outcomes = [self._score_alone(plan, saves) for plan in plans]
        compute_s = time.perf_counter() - start
        if tokens_at_least(plans, TRIM_AFTER_TOKENS):
            give_back_memory()
        return [Scored(scores, error, compute_s, cached) for scores, error, cached in outcomes]

    def _score_alone(self, plan: list[Prompt], saves: bool = True) -> tuple:
        try:
            (scores,), (cached,) = self.executor.score_reusing([plan], saves)
            return scores, None, cached
        except Exception as exc:  # noqa: BLE001
            return None, failure(exc), 0

    def prompt_logprobs(self, prompts: list[list[int]], top: int, ranks: bool = False) -> list[PromptLogprobs]:
        """Every token of each prompt scored (echo, loglikelihood), shared starts computed once."""
        out = prompt_logprobs(self.executor, prompts, top, ranks)
        if sum(map(len, prompts)) >= TRIM_AFTER_TOKENS:
            give_back_memory()
        return out

    def decide(self, body) -> dict:
        """Prepare, score and answer one request in this thread (warm-up, tests, tools)."""
        prepared = self.prepare(body)
        scored, *prior_scored = self.score([prepared.prompts, *prepared.prior_plans])
        return self.answer(prepared, scored.result(), prior_scored)

    def warmup(self) -> bool:
        """Run a fixed request twice; True when both answers are identical (determinism check)."""
        return self.decide(WARMUP) == self.decide(WARMUP)
