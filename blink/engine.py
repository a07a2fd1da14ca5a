"""The decision engine: a request becomes prompts (main process), scores (one GPU call), answers.

The three steps are separate on purpose. `prepare` and `answer` run in the main process on plain CPU data;
`score_many` is the only step that touches the model, takes plain data and returns plain floats, so on
ZeroGPU it can be wrapped in `@spaces.GPU` and cross the process boundary by pickle, and a batcher can
hand it many requests at once.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from .answers import answer
from .errors import EngineFailure
from .executor import Executor, Prompt
from .limits import Limits
from .loading import Loaded
from .prompts import PromptBuilder, decision_config_for, processed_tokens
from .questions import Decision, parse_decision

log = logging.getLogger("blink")

WARMUP = {
    "state": "Order 4471 arrived with a cracked screen. The customer attached photos and wants a replacement.",
    "questions": {
        "route": {"type": "choice", "instructions": "Which team should handle this?",
                  "criteria": {"returns": "Damaged or wrong items", "billing": "Charges and refunds",
                               "shipping": "Late or lost parcels"}},
        "urgent": {"type": "noul", "instructions": "Does this need a reply today?"},
        "tone": {"type": "score", "instructions": "How upset is the customer?",
                 "criteria": ["Calm", "Annoyed", "Angry"]},
    },
}


@dataclass
class Prepared:
    """A validated, tokenized decision: what the GPU call needs (`prompts`) and what the answers need."""

    decision: Decision
    prompts: list[Prompt]
    input_tokens: int


class Engine:
    def __init__(self, loaded: Loaded, limits: Limits | None = None):
        self.loaded = loaded
        self.limits = limits or Limits()
        self.tokenizer = loaded.tokenizer
        self.config = decision_config_for(str(loaded.root), loaded.tokenizer)
        self.prompts = PromptBuilder(loaded.tokenizer, self.config, self.limits)
        self.executor = Executor(loaded.model, loaded.tokenizer.pad_token_id)

    # main process --------------------------------------------------------------------------------------
    def prepare(self, body) -> Prepared:
        decision = parse_decision(body, self.config, self.limits)
        prompts = self.prompts.build(decision)
        return Prepared(decision, prompts, processed_tokens(prompts))

    def answer(self, prepared: Prepared, scores: list[list[list[float]]]) -> dict:
        """Answers keyed by question id, in request order."""
        logits = [row for prompt_scores in scores for row in prompt_scores]
        return {q.name: answer(q, row) for q, row in zip(prepared.decision.questions, logits)}

    # the GPU step ----------------------------------------------------------------------------------------
    def score_many(self, plans: list[list[Prompt]]) -> dict:
        """Scores many requests in one call. Each gets its scores or its own error string; never raises for
        one request's sake. Returns plain data: {"results": [...], "compute_s": float}."""
        start = time.perf_counter()
        try:
            results = [("ok", r) for r in self.executor.score(plans)]
        except Exception as exc:  # noqa: BLE001 - retried one by one so each request keeps its own outcome
            if len(plans) == 1:
                log.exception("forward pass failed")
                results = [("error", f"{type(exc).__name__}: {exc}")]
            else:
                results = []
                for plan in plans:
                    try:
                        results.append(("ok", self.executor.score([plan])[0]))
                    except Exception as one:  # noqa: BLE001
                        log.exception("forward pass failed")
                        results.append(("error", f"{type(one).__name__}: {one}"))
        return {"results": results, "compute_s": time.perf_counter() - start}

    def decide(self, body) -> dict:
        """Prepare, score and answer one request in this thread (warm-up, tests, tools)."""
        prepared = self.prepare(body)
        status, scores = self.score_many([prepared.prompts])["results"][0]
        if status != "ok":
            raise EngineFailure(scores)
        return self.answer(prepared, scores)

    def warmup(self) -> bool:
        """Run a fixed request twice; True when both answers are identical (determinism check)."""
        return self.decide(WARMUP) == self.decide(WARMUP)
