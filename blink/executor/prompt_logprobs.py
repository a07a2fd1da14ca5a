"""Every token of a prompt scored by the model: the log-softmax at every position (echo, loglikelihood evaluation).

Input is token ids, output plain floats (blink.plan.PromptLogprobs), so it runs in this process, in a ZeroGPU
worker and in tests, like the decision passes.

The passes are the executor's own (core.py): prompts that share a start (a question and its K answers, as lm-eval
sends them) run as one group, whose common token prefix is prefilled once and fanned out to one row per prompt;
then the hidden states meet the whole LM head, a chunk of positions at a time so a long prompt never holds a
[tokens x vocabulary] matrix at once, and the shared prefix's positions once for the group (they read alike in
every prompt of it). With the prefix-state cache on, a prefix that starts like one scored in an earlier request
resumes from its saved state and scores (`scoring_prefixes.py`): lm-eval's choices sent one a request share their
context too.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import torch

from blink.executor.compute_thread import on_cpu_thread
from blink.executor.scoring_prefixes import ScoringPrefixes
from blink.plan import Prompt, PromptLogprobs, common_prefix_length

CHUNK = 256  # positions per LM-head product: 256 x a 152k vocabulary is 156 MB of fp32 logits


def share_groups(prompts: list[list[int]]) -> list[list[int]]:
    """The prompts (by index) that run as one group. Sorted, prompts with a long common start are neighbours; a
    prompt joins its neighbour's group while that keeps at least half of the group's shared prefix (and some),
    else it starts a group of its own: a batch of unrelated items does not shrink every prefix to nothing."""
    groups: list[list[int]] = []
    shared = 0
    for i in sorted(range(len(prompts)), key=lambda i: prompts[i]):
        if groups:
            first = prompts[groups[-1][0]]
            n = common_prefix_length([first[:shared], prompts[i]])
            if n > 0 and 2 * n >= shared:
                groups[-1].append(i)
                shared = n
                continue
        groups.append([i])
        shared = len(prompts[i])
    return groups


def prompt_logprobs(executor, prompts: list[list[int]], top: int, ranks: bool = False) -> list[PromptLogprobs]:
    """Per prompt (non-empty token ids), every token's logprob (and rank, with `ranks`; else `ranks` is empty)
    after the ones before it, and the `top` (at least 1) most likely tokens at every position and after the last.
    On the CPU it runs on the compute thread."""
    return on_cpu_thread(executor.device, _prompt_logprobs, executor, prompts, top, ranks)


@torch.inference_mode()
def _prompt_logprobs(executor, prompts: list[list[int]], top: int, ranks: bool) -> list[PromptLogprobs]:
    started = time.perf_counter()
    order = share_groups(prompts)
    groups = [[Prompt(list(prompts[i]), []) for i in g] for g in order]
    inputs = executor.inputs(groups)
    k, out = max(1, top), [None] * len(prompts)
    reuse = ScoringPrefixes(executor, inputs, k, ranks)
    runs = reuse.run()

    def score(states, targets):
        return head_rows(executor.head, states, targets, k, ranks)

    for bucket in executor.prefix_passes(inputs, list(runs)):
        suffixes = executor.suffixes(inputs, executor.stacked(inputs, bucket, [runs[g].cache for g in bucket]))
        for g in bucket:
            # the positions whose next token lies in the common prefix read alike in every prompt of the group:
            # their LM-head product (the larger part of the work on a small model with a large vocabulary) is done
            # once, or not at all where a saved prefix holds it
            n = inputs.prefix_len[g]
            run = runs.pop(g)
            common, last = reuse.shared(g, run, score)
            common = common.lists()
            for m, i in enumerate(order[g]):
                ids = prompts[i]
                states = torch.cat([last[None], suffixes.pop((g, m))[: len(ids) - n]]) if len(ids) > n else last[None]
                logprobs, ranked, tops = (a + b for a, b in zip(common, score(states, ids[n:]).lists()))
                # the last position has no next prompt token; a resumed start is counted once, on the group's first
                out[i] = PromptLogprobs(logprobs[:-1], ranked[:-1], tops, cached_tokens=0 if m else run.start)
    reuse.remember(prompts)
    seconds = time.perf_counter() - started
    return [replace(r, compute_s=seconds) for r in out]


@dataclass
class Rows:
    """What the LM head gave a run of positions, as tensors (a saved prefix keeps them: its bytes are counted)."""

    logprobs: torch.Tensor  # [n]: each position's next token's
    ranks: torch.Tensor | None  # [n], where asked
    values: torch.Tensor  # [n, k]: the k most likely
    indices: torch.Tensor  # [n, k]

    def __add__(self, other: Rows) -> Rows:
        ranks = None if self.ranks is None or other.ranks is None else torch.cat([self.ranks, other.ranks])
        cat = torch.cat
        return Rows(
            cat([self.logprobs, other.logprobs]),
            ranks,
            cat([self.values, other.values]),
            cat([self.indices, other.indices]),
        )

    def cut(self, n: int, k: int, ranked: bool) -> Rows:
        """The first `n` positions, `k` alternatives each, ranks where `ranked`, in tensors of their own."""
        ranks = self.ranks[:n].clone() if ranked else None
        return Rows(self.logprobs[:n].clone(), ranks, self.values[:n, :k].clone(), self.indices[:n, :k].clone())

    @property
    def nbytes(self) -> int:
        tensors = [self.logprobs, self.values, self.indices] + ([self.ranks] if self.ranks is not None else [])
        return sum(t.numel() * t.element_size() for t in tensors)

    def lists(self) -> tuple[list, list, list]:
        """Plain lists: logprobs, ranks (empty where not asked), and per position its (token, logprob) pairs."""
        ranks = self.ranks.tolist() if self.ranks is not None else []
        tops = [list(zip(i, v)) for i, v in zip(self.indices.tolist(), self.values.tolist())]
        return self.logprobs.tolist(), ranks, tops


def head_rows(head: torch.Tensor, states: torch.Tensor, targets: list[int], k: int, ranked: bool) -> Rows:
    """The LM head over hidden states [positions, H], a chunk at a time: the logprob (and with `ranked` the rank) of
    each position's next token (`targets`; a position past them, the prompt's last, gets a placeholder) and the k
    most likely."""
    targets = torch.tensor((targets + [0] * len(states))[: len(states)], device=states.device, dtype=torch.long)
    logprobs, ranks, values, indices = [], [], [], []
    for start in range(0, len(states), CHUNK):
        # log_softmax's fused kernel, not logsumexp (3x slower on the CPU); `max` for one alternative (topk: 1.5x);
        # ranks, another pass over the rows, only when asked
        rows = torch.log_softmax(torch.nn.functional.linear(states[start : start + CHUNK], head).float(), dim=-1)
        picked = rows.gather(1, targets[start : start + CHUNK, None])
        if ranked:
            ranks.append((rows > picked).sum(dim=1) + 1)
        logprobs.append(picked[:, 0])
        top = rows.max(dim=-1, keepdim=True) if k == 1 else rows.topk(k, dim=-1)
        values.append(top[0])
        indices.append(top[1])
    if not logprobs:  # no positions: empty rows of the right shapes
        empty = torch.zeros((0, k), device=states.device)
        return Rows(empty[:, 0], empty[:, 0].long() if ranked else None, empty, empty.long())
    return Rows(torch.cat(logprobs), torch.cat(ranks) if ranked else None, torch.cat(values), torch.cat(indices))
