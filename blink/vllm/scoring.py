"""Decision scores from vLLM: the executor's read plans in, the same scores structure out.

blink still renders every prompt with the model's own decision template and tokenizes it (`Engine.prepare`);
what crosses to vLLM is token ids. Each read (a prompt position and its label token ids) becomes one
completion of one token over the prompt cut just after that position, asking for the log-probabilities of
exactly the label tokens (`logprob_token_ids`, vLLM's per-token logprob selection, made for this kind of
scoring). vLLM computes logits only at that last row, and its sampler gathers only the label columns (on CUDA
in one Triton kernel that never writes the full-vocabulary logprobs; on CPU a log_softmax then a gather).
Questions about one state share their prefix in vLLM's prefix cache, on the replica the state is routed to.

The scores are label log-probabilities divided by the question's temperature: the label logits shifted by one
constant per read, so every softmax over labels (and every answer) is the same as from blink's own executor.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor

from blink.errors import BlinkError, EngineFailure, InvalidRequest
from blink.plan import Prompt, Scored
from blink.vllm.affinity import Route, route_for
from blink.vllm.replicas import Replica, Replicas, finish_reason

log = logging.getLogger("blink")

# vLLM's cap on `logprob_token_ids` per request (vllm.sampling_params.MAX_LOGPROB_TOKEN_IDS, 0.32 and main):
# a read with more labels is split into several requests, each a full prefix-cache hit after the first
MAX_LABEL_IDS = 128


class VllmScorer:
    """`score` with the contract of `blink.backend.Backend.score`, answered by vLLM replicas."""

    def __init__(self, replicas: Replicas, *, workers: int = 16, max_label_ids: int = MAX_LABEL_IDS):
        self.replicas = replicas
        self.max_label_ids = max_label_ids
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="blink-vllm")

    @staticmethod
    def prompts(plan: list[Prompt]) -> list[list[int]]:
        """What vLLM is sent: each read's prompt, cut just after its read position."""
        return [prompt.ids[: read.position + 1] for prompt in plan for read in prompt.reads]

    def route(self, plan: list[Prompt]) -> Route:
        return route_for(self.prompts(plan))

    def score(self, plans: list[list[Prompt]], caller=None) -> list[Scored]:
        """Scores many requests, each on its own replica (in parallel): one `Scored` per plan, with its scores or
        its own typed error (`Overloaded` when no replica could take it, `InvalidRequest` when the model server
        refused it as malformed); never raises for one request's sake. `caller` is moot here (the batch runner's
        signature)."""
        start = time.perf_counter()
        outcomes = [self._outcome(plans[0])] if len(plans) == 1 else list(self.pool.map(self._outcome, plans))
        compute_s = time.perf_counter() - start
        return [Scored(scores, error, compute_s) for scores, error in outcomes]

    def _outcome(self, plan: list[Prompt]) -> tuple:
        try:
            return self.score_one(plan), None
        except BlinkError as error:
            return None, error
        except Exception as error:  # noqa: BLE001 - each request keeps its own outcome
            log.exception("scoring through vLLM failed")
            return None, EngineFailure(f"the model server failed on this request: {type(error).__name__}: {error}")

    def score_one(self, plan: list[Prompt]) -> list[list[list[float]]]:
        """Label scores per prompt, per read, of one request: all its reads on one replica, in one completion
        request per chunk of its labels (the union over its questions: a few more gathered columns cost nothing
        next to one more request)."""
        if any(p.images for p in plan):  # refused by every wire before admission; met here, still the client's 400
            raise InvalidRequest("the vllm engine reads text only: images are not accepted", kind="images_unsupported")
        reads = [(p, read) for p, prompt in enumerate(plan) for read in prompt.reads]
        for p, read in reads:
            if not 0 <= read.position < len(plan[p].ids):
                raise EngineFailure(f"read position {read.position} is outside its prompt")
        prompts = self.prompts(plan)
        labels = sorted({token for _, read in reads for token in read.label_ids})
        chunks = [labels[c : c + self.max_label_ids] for c in range(0, len(labels), self.max_label_ids)]
        logprobs = self.replicas.call(route_for(prompts), lambda replica: self._read(replica, prompts, chunks))
        scores, k = [], 0
        for prompt in plan:
            per_prompt = []
            for read in prompt.reads:
                per_prompt.append([logprobs[k][token] / read.temperature for token in read.label_ids])
                k += 1
            scores.append(per_prompt)
        return scores

    def _read(self, replica: Replica, prompts: list[list[int]], chunks: list[list[int]]) -> list[dict]:
        """Per prompt, {label id: log-probability of it as the next token} for every label of `chunks`."""
        out: list[dict] = [{} for _ in prompts]
        for labels in chunks:
            body = {
                "prompt": prompts,
                "max_tokens": 1,
                "temperature": 0.0,
                "logprobs": len(labels),
                "logprob_token_ids": labels,
                "return_tokens_as_token_ids": True,
            }
            choices = sorted(
                self.replicas.post(replica, "/v1/completions", body)["choices"], key=lambda choice: choice["index"]
            )
            if len(choices) != len(prompts):
                raise EngineFailure(f"the model server answered {len(choices)} reads of {len(prompts)}")
            for values, choice in zip(out, choices):
                finish_reason(choice)  # an aborted read is retried on another replica, never read as scores
                try:
                    top = choice["logprobs"]["top_logprobs"][0]
                    values.update({token: float(top[f"token_id:{token}"]) for token in labels})
                except (KeyError, IndexError, TypeError) as missing:
                    raise EngineFailure(f"the model server left out a log-probability ({missing!r})") from None
        return out

    def close(self) -> None:
        self.pool.shutdown(wait=False)
