"""What crosses the GPU call each way, as plain data (no torch): the plan of a decision and its outcome, and the
parameters of a generation.

A request becomes prompts (`prompts.py`, main process), the prompts cross to the GPU call (`executor.py`; on
ZeroGPU by pickle) and a `Scored` per request comes back. The numbers that size and bill the call
(`processed_tokens`, `image_usage`) are read from the prompts. A chat turn crosses as token ids and one
`GenerationParams` (blink.generate.chat_engine.ChatEngine.generate, the Space's GPU chat function,
blink.vllm.chat.VllmChat).
Everything here is plain Python, so rendering, batching and the Space's duration estimate import no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from blink.errors import BlinkError


@dataclass
class Read:
    """Where one question's answer is read in its prompt: the position, the label token ids, the temperature."""

    position: int
    label_ids: list[int]
    temperature: float = 1.0


@dataclass(eq=False)
class Image:
    """One image of a request, preprocessed (CPU tensors): shared by every prompt that shows it, so it is
    pickled once and encoded once per call."""

    key: str  # content hash: prompts showing the same image share the prefix through it
    pixel_values: object  # torch.Tensor [patches, dim], CPU
    grid_thw: list[int]


@dataclass
class Prompt:
    ids: list[int]
    reads: list[Read]
    images: list[Image] = field(default_factory=list)  # in order of appearance in `ids`
    state_end: int = 0  # tokens up to the end of the state: where the prefix-state cache saves (0: nowhere)
    system_end: int = 0  # tokens up to the end of a system prompt leading the state: a second save point (0: none)


class RenderedPrompt(NamedTuple):
    """One decision prompt as `blink.decide.prompts` renders it, before its reads are resolved into a `Prompt`."""

    ids: list[int]
    marks: list[int]  # per question: the position after its answer mark (the read is at `mark - 1`)
    questions: list  # transformers.decision.Question, in the order of `marks`
    images: list[Image]  # in order of appearance in `ids`
    state_end: int = 0  # as `Prompt.state_end`
    system_end: int = 0  # as `Prompt.system_end`


@dataclass(frozen=True)
class GenerationParams:
    """What one generation is asked beyond its token ids. Plain data (numbers, strings, tuples, the constraint's
    plain dict, the images' `Image`s), so it pickles to a ZeroGPU worker; frozen: a route that changes a value
    (the output budget, the images) makes a new one with `dataclasses.replace`.

    A sampling value left None takes the engine's default (the model's generation_config, else OpenAI's)."""

    max_tokens: int | None = None  # None: the engine's cap
    temperature: float | None = None  # 0: greedy
    top_p: float | None = None
    top_k: int | None = None  # 0: off
    seed: int | None = None  # None: a fresh random seed per generation
    stop: tuple[str, ...] = ()  # stop strings: the first that completes ends the text, unsent
    constraint: dict | None = None  # what blink.generate.structured.check_constraint returned, or None
    logprobs: bool = False  # token logprobs with each delta (blink.generate.chat_engine.Delta)
    top_logprobs: int = 0  # alternatives per token (0-20), with `logprobs`
    eos_entry: bool = False  # with `logprobs`: an entry for the end-of-sequence token too (echo: one per token drawn)
    images: tuple[Image, ...] = ()  # per image in the prompt's ids (vision models)

    def __post_init__(self):
        # sequences are kept as tuples whatever a caller passed (lists from the wire), so the value stays frozen
        object.__setattr__(self, "stop", tuple(self.stop))
        object.__setattr__(self, "images", tuple(self.images))


@dataclass(frozen=True)
class PromptLogprobs:
    """One prompt's tokens scored by the model (echo, loglikelihood): plain data, so it crosses a ZeroGPU call.

    For a prompt of L tokens: `token_logprobs[i]`, `ranks[i]` are token i+1's logprob given the tokens before it and
    its rank in that distribution (1: the most likely; `ranks` is empty unless asked for); `top[i]` that
    distribution's most likely `(token id, logprob)`, most likely first. `top` has one more entry than the others,
    last: the distribution of the token after the prompt (what a greedy first step takes)."""

    token_logprobs: list[float]
    ranks: list[int]
    top: list[list[tuple[int, float]]]
    compute_s: float = 0.0
    cached_tokens: int = 0  # of its tokens, those resumed from a state an earlier request saved (a group's: its first)


@dataclass(frozen=True)
class Scored:
    """One request's outcome of a GPU call: its label logits (per prompt, per read) or the error it failed with,
    and the compute seconds of the whole call (every request of a batch carries the same), and the prompt tokens
    the prefix-state cache spared it. Plain data, so it crosses from a ZeroGPU worker by pickle; a `BlinkError`
    keeps its type, status and location on the way."""

    scores: list | None = None
    error: BlinkError | None = None
    compute_s: float = 0.0
    cached_tokens: int = 0

    def result(self) -> list:
        """The scores, or raises the request's error: the one place an outcome is read."""
        if self.error is not None:
            raise self.error
        return self.scores


def common_prefix_length(rows: list) -> int:
    """Length of the longest common prefix of sequences (token lists or strings): a binary search on slice
    equality per row (list comparison runs in C, where a token-by-token Python loop over a 2,000-token state
    per question costs milliseconds)."""
    first, n = rows[0], min(len(r) for r in rows)
    for row in rows[1:]:
        if row[:n] == first[:n]:
            continue
        lo, hi = 0, n  # first[:lo] == row[:lo]; first[:hi] != row[:hi]
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if row[:mid] == first[:mid]:
                lo = mid
            else:
                hi = mid
        n = lo
    return n


def processed_tokens(prompts: list[Prompt]) -> int:
    """Tokens the executor runs for one request: the shared prefix once, then each prompt's suffix."""
    if len(prompts) == 1:
        return len(prompts[0].ids)
    prefix = common_prefix_length([p.ids for p in prompts])
    return prefix + sum(len(p.ids) - prefix for p in prompts)


def tokens_at_least(plans: list[list[Prompt]], n: int) -> bool:
    """Whether `processed_tokens` of the plans together reach `n`. Their prompts' whole lengths bound that from above
    and cost a fraction of finding the shared prefixes, so those are found only when the bound reaches `n`."""
    return sum(len(p.ids) for plan in plans for p in plan) >= n and sum(map(processed_tokens, plans)) >= n


def image_usage(prompts: list[Prompt], processor) -> dict:
    """What the images cost: pixels the model saw (after resizing) and visual tokens, each image counted
    once per request however many questions show it."""
    merge = processor.image_processor.merge_size
    patch = processor.image_processor.patch_size
    seen = {}
    for prompt in prompts:
        for image in prompt.images:
            seen[image.key] = image.grid_thw
    pixels = sum(h * w for _, h, w in seen.values()) * patch * patch
    tokens = sum(t * h * w for t, h, w in seen.values()) // (merge * merge)
    return {"image_pixels": pixels, "visual_tokens": tokens}
