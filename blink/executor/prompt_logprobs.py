"""Every token of a prompt scored by the model: the log-softmax at every position (echo, loglikelihood evaluation).

Input is token ids, output plain floats (blink.plan.PromptLogprobs), so it runs in this process, in a ZeroGPU
worker and in tests, like the decision passes.

The passes are the executor's own (core.py): prompts that share a start (a question and its K answers, as lm-eval
sends them) run as one group, whose common token prefix is prefilled once and fanned out to one row per prompt;
then the hidden states meet the whole LM head, a chunk of positions at a time so a long prompt never holds a
[tokens x vocabulary] matrix at once, and the shared prefix's positions once for the group (they read alike in
every prompt of it).
"""

from __future__ import annotations

import time

import torch

from blink.executor.compute_thread import on_cpu_thread
from blink.plan import Prompt, PromptLogprobs, Read, common_prefix_length

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
    groups = [[Prompt(list(prompts[i]), [Read(k, []) for k in range(len(prompts[i]))]) for i in g] for g in order]
    inputs = executor.inputs(groups)
    hidden = executor.read_hidden(inputs, {})
    k, out = max(1, top), [None] * len(prompts)
    for g, members in enumerate(order):
        # the positions whose next token lies in the common prefix read alike in every prompt of the group: their
        # LM-head product (the larger part of the work on a small model with a large vocabulary) is done once
        shared = max(0, inputs.prefix_len[g] - 1) if len(members) > 1 else 0
        ids = prompts[members[0]]
        common = scored(executor.head, [hidden[(g, 0, p)] for p in range(shared)], ids[1 : shared + 1], k, ranks)
        for m, i in enumerate(members):
            ids = prompts[i]
            states = [hidden.pop((g, m, p)) for p in range(shared, len(ids))]
            own = scored(executor.head, states, ids[shared + 1 :], k, ranks)
            logprobs, ranked, tops = (a + b for a, b in zip(common, own))
            out[i] = PromptLogprobs(logprobs[:-1], ranked[:-1], tops)  # the last position has no next prompt token
    seconds = time.perf_counter() - started
    return [PromptLogprobs(r.token_logprobs, r.ranks, r.top, seconds) for r in out]


def scored(head: torch.Tensor, states: list, targets: list[int], k: int, ranked: bool) -> tuple[list, list, list]:
    """The LM head over hidden states (one per position), a chunk at a time: the logprob (and with `ranked` the
    rank) of each position's next token (`targets`; a position past them, the prompt's last, gets a placeholder)
    and the k most likely."""
    if not states:
        return [], [], []
    states = torch.stack(states)
    targets = torch.tensor((targets + [0] * len(states))[: len(states)], device=states.device)
    logprobs, ranks, tops = [], [], []
    for start in range(0, len(states), CHUNK):
        # log_softmax's fused kernel, not logsumexp (3x slower on the CPU); `max` for one alternative (topk: 1.5x);
        # ranks, another pass over the rows, only when asked
        rows = torch.log_softmax(torch.nn.functional.linear(states[start : start + CHUNK], head).float(), dim=-1)
        picked = rows.gather(1, targets[start : start + CHUNK, None])
        if ranked:
            ranks += ((rows > picked).sum(dim=1) + 1).tolist()
        logprobs += picked[:, 0].tolist()
        values, indices = rows.max(dim=-1, keepdim=True) if k == 1 else rows.topk(k, dim=-1)
        tops += [list(zip(i, v)) for i, v in zip(indices.tolist(), values.tolist())]
    return logprobs, ranks, tops
