"""Every token of a prompt scored by vLLM replicas (echo, loglikelihood): `blink.backend.Backend.prompt_logprobs`.

One completion request for all of a request's prompts, on one replica (vLLM's prefix caching computes a start they
share once): `prompt_logprobs: k` gives each prompt token's logprob and rank and the k most likely at its position
(`{id: {logprob, rank, decoded_token}}`, the first `null`), and one greedy token with `logprobs: k` and
`return_tokens_as_token_ids` gives the k most likely after the prompt (`"token_id:N"` keys).
"""

from __future__ import annotations

import time

from blink.errors import EngineFailure
from blink.plan import PromptLogprobs
from blink.vllm.affinity import route_for
from blink.vllm.replicas import Replicas, finish_reason


def prompt_logprobs(replicas: Replicas, prompts: list[list[int]], top: int) -> list[PromptLogprobs]:
    k = max(1, top)
    body = {
        "prompt": prompts,
        "max_tokens": 1,
        "temperature": 0.0,
        "logprobs": k,
        "prompt_logprobs": k,
        "return_tokens_as_token_ids": True,
    }
    started = time.perf_counter()
    answer = replicas.call(route_for(prompts), lambda replica: replicas.post(replica, "/v1/completions", body))
    choices = sorted(answer["choices"], key=lambda choice: choice["index"])
    if len(choices) != len(prompts):
        raise EngineFailure(f"the model server answered {len(choices)} prompts of {len(prompts)}")
    seconds = time.perf_counter() - started
    try:
        return [read(ids, choice, k, seconds) for ids, choice in zip(prompts, choices)]
    except (KeyError, IndexError, TypeError, ValueError) as missing:
        raise EngineFailure(f"the model server left out a prompt log-probability ({missing!r})") from None


def read(ids: list[int], choice: dict, k: int, seconds: float) -> PromptLogprobs:
    finish_reason(choice)  # an aborted request is retried on another replica, never read as logprobs
    positions = choice["prompt_logprobs"][1:]
    logprobs, ranks, tops = [], [], []
    for token, position in zip(ids[1:], positions):
        own = position[str(token)]
        logprobs.append(float(own["logprob"]))
        ranks.append(int(own["rank"]))
        best = sorted(position.items(), key=lambda item: item[1]["rank"])
        tops.append([(int(t), float(v["logprob"])) for t, v in best if v["rank"] <= k][:k])
    after = choice["logprobs"]["top_logprobs"][0]
    best = sorted(after.items(), key=lambda item: -item[1])[:k]
    tops.append([(int(t.removeprefix("token_id:")), float(lp)) for t, lp in best])
    if len(logprobs) != len(ids) - 1:
        raise EngineFailure(f"the model server scored {len(logprobs)} prompt tokens of {len(ids) - 1}")
    return PromptLogprobs(logprobs, ranks, tops, seconds)
