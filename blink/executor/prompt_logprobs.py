"""Every token of a prompt scored by the model: the log-softmax at every position (echo, loglikelihood evaluation).

Input is token ids, output plain floats (blink.plan.PromptLogprobs), so it runs in this process, in a ZeroGPU
worker and in tests, like the decision passes.

The passes are the executor's own (core.py): prompts that share a start (a question and its K answers, as lm-eval
sends them) run as one group, whose common token prefix is prefilled once and fanned out to one row per prompt;
only then the hidden state at every position of every prompt meets the whole LM head, a chunk of positions at a
time so a long prompt never holds a [tokens x vocabulary] matrix at once.
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


def prompt_logprobs(executor, prompts: list[list[int]], top: int) -> list[PromptLogprobs]:
    """Per prompt (non-empty token ids), every token's logprob and rank after the ones before it, and the `top`
    (at least 1) most likely tokens at every position and after the last. On the CPU it runs on the compute thread."""
    return on_cpu_thread(executor.device, _prompt_logprobs, executor, prompts, top)


@torch.inference_mode()
def _prompt_logprobs(executor, prompts: list[list[int]], top: int) -> list[PromptLogprobs]:
    started = time.perf_counter()
    order = share_groups(prompts)
    groups = [[Prompt(list(prompts[i]), [Read(k, []) for k in range(len(prompts[i]))]) for i in g] for g in order]
    hidden = executor.read_hidden(executor.inputs(groups), {})
    out: list = [None] * len(prompts)
    for g, members in enumerate(order):
        for p, i in enumerate(members):
            states = torch.stack([hidden.pop((g, p, k)) for k in range(len(prompts[i]))])
            out[i] = scored(executor.head, states, prompts[i], max(1, top))
    seconds = time.perf_counter() - started
    return [PromptLogprobs(r.token_logprobs, r.ranks, r.top, seconds) for r in out]


def scored(head: torch.Tensor, states: torch.Tensor, ids: list[int], k: int) -> PromptLogprobs:
    """The LM head over one prompt's hidden states [L, H], a chunk at a time: the logprob and rank of each next
    token, and the k most likely at each position (the last position's are the token after the prompt's)."""
    targets = torch.tensor(ids[1:] + [0], device=states.device)  # the last position has no next prompt token
    logprobs, ranks, tops = [], [], []
    for start in range(0, len(ids), CHUNK):
        rows = torch.log_softmax(torch.nn.functional.linear(states[start : start + CHUNK], head).float(), dim=-1)
        picked = rows.gather(1, targets[start : start + CHUNK, None])
        ranks += ((rows > picked).sum(dim=1) + 1).tolist()
        logprobs += picked[:, 0].tolist()
        values, indices = rows.topk(k, dim=-1)
        tops += [list(zip(i, v)) for i, v in zip(indices.tolist(), values.tolist())]
    return PromptLogprobs(logprobs[:-1], ranks[:-1], tops)
