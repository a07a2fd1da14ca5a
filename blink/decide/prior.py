"""Content-free prior normalization ("Calibrate Before Use", Zhao et al., ICML 2021): answers freed from the label
prior a question has whatever the state says.

A decision model favours some labels on any text (a label token that is simply more frequent, the last option, the
surface form of an option). Temperature scaling cannot remove that: it rescales confidence and never moves the
argmax. Here the same question is asked about content-free states (`DEFAULT_STATES`: "N/A", "" and "[MASK]", the
paper's; `--prior-states`), its option probabilities are averaged over them into the question's prior `c`, and the
answer's probabilities `p` are divided by it and renormalized: `q_i = (p_i / c_i) / sum_j (p_j / c_j)`. A
content-free state answered with a prior of that state alone comes out uniform.

Both `p` and `c` are read exactly as the answer is served otherwise (the calibration temperatures of `fitted+prior`
applied to both, every rotation of `x_order: "rotate"` read and averaged by option name), so `"prior"` changes
nothing but the division.

The content-free prompts are scored by the backend like any request (`score(plans, caller)`), one extra plan per
content-free state (its template head and state are the plan's shared prefix, like any other), in the same call as
the request. Their label logits are kept by each prompt's exact tokens (its ids and its reads), so a question asked
again costs no forward pass for its prior: only the rendering of the content-free prompts, to find their keys.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from dataclasses import dataclass, field, replace

from blink.decide.answers import normalized, probabilities, rows_by_question  # noqa: F401 - normalized: the division
from blink.plan import Prompt, Scored, processed_tokens

DEFAULT_STATES = ("N/A", "", "[MASK]")
CACHE_PROMPTS = 8192  # content-free prompts whose label logits are kept (a few hundred bytes of key each)


def prompt_key(prompt: Prompt) -> tuple:
    """A prompt by its exact tokens and the reads taken from them."""
    return tuple(prompt.ids), tuple((r.position, tuple(r.label_ids), r.temperature) for r in prompt.reads)


class PriorCache:
    """The label logits of content-free prompts, by `prompt_key`, least recently used dropped past `size`."""

    def __init__(self, size: int = CACHE_PROMPTS):
        self.size = size
        self._rows: OrderedDict[tuple, list] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, key: tuple) -> list | None:
        with self._lock:
            rows = self._rows.get(key)
            if rows is None:
                self.misses += 1
                return None
            self._rows.move_to_end(key)
            self.hits += 1
            return rows

    def put(self, key: tuple, rows: list) -> None:
        with self._lock:
            self._rows[key] = rows
            self._rows.move_to_end(key)
            while len(self._rows) > self.size:
                self._rows.popitem(last=False)

    def stats(self) -> dict:
        with self._lock:
            return {"prompts": len(self._rows), "max_prompts": self.size, "hits": self.hits, "misses": self.misses}


@dataclass
class PriorPlan:
    """A request's content-free prompts: per state, each prompt's key and label logits (None until scored), and
    the plans still to score (one per state with a prompt not yet kept)."""

    states: tuple[str, ...]
    keys: list[list[tuple]]
    rows: list[list[list | None]]
    plans: list[list[Prompt]] = field(default_factory=list)
    where: list[tuple[int, list[int]]] = field(default_factory=list)  # per plan: (state index, prompt indexes)
    tokens: int = 0  # tokens the model runs for them in this request (0: every one was kept)
    answers: dict | None = None  # the prior of every question, in its answer's shape (set when answered)

    def fill(self, scored: list[Scored], cache: PriorCache) -> None:
        """The scored plans' label logits into `rows` (and the cache); raises a failed plan's error."""
        if len(scored) != len(self.plans):
            raise ValueError(f"{len(self.plans)} content-free plans to fill, {len(scored)} results given")
        for (state, indexes), outcome in zip(self.where, scored):
            for index, rows in zip(indexes, outcome.result(), strict=True):
                self.rows[state][index] = rows
                cache.put(self.keys[state][index], rows)
        self.plans, self.where = [], []

    def logits(self) -> list[list[list[float]]]:
        """Per state, the label logits of every read in read order (as `DecisionPlanner.answer` flattens them)."""
        if self.plans:
            raise RuntimeError("the content-free plans were not scored: fill() them first")
        return [[row for prompt_rows in state_rows for row in prompt_rows] for state_rows in self.rows]


def plan_prior(build, decision, states: tuple[str, ...], cache: PriorCache) -> PriorPlan:
    """The content-free prompts of `decision`: `build(decision)` renders a decision into its prompts (rotations
    included) exactly as the request's are; only those not kept are left to score."""
    keys, rows, plans, where = [], [], [], []
    for index, state in enumerate(states):
        prompts = build(replace(decision, state=state))
        state_keys = [prompt_key(p) for p in prompts]
        state_rows = [cache.get(k) for k in state_keys]
        missing = [i for i, r in enumerate(state_rows) if r is None]
        if missing:
            plans.append([prompts[i] for i in missing])
            where.append((index, missing))
        keys.append(state_keys)
        rows.append(state_rows)
    tokens = sum(processed_tokens(plan) for plan in plans)
    return PriorPlan(tuple(states), keys, rows, plans, where, tokens)


def priors(questions: list, readings: list, per_state: list[list[list[float]]], temperatures: dict) -> dict:
    """Each question's prior: the mean over the content-free states of its option probabilities there (read as
    its answer is: temperature, every reading averaged), in its option order."""
    dists: dict[str, list[list[float]]] = {q.name: [] for q in questions}
    for logits in per_state:
        rows = rows_by_question(questions, readings, logits)
        for q in questions:
            dists[q.name].append(probabilities(rows[q.name], temperatures.get(q.name, 1.0)))
    return {name: [math.fsum(column) / len(d) for column in zip(*d)] for name, d in dists.items()}


def check_states(states) -> tuple[str, ...]:
    """Content-free states as configured: one or more strings (an empty string is one)."""
    if isinstance(states, str) or not isinstance(states, (list, tuple)) or not states:
        raise ValueError("content-free states are a non-empty list of strings")
    if not all(isinstance(s, str) for s in states):
        raise ValueError("content-free states must be strings")
    return tuple(states)
