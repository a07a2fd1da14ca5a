"""blink's vLLM backend (`blink.vllm`) against real vLLM replicas: a CPU build of vLLM (`ci/vllm-venv.sh` builds
.venv-vllm; it fails the run loudly if it can't, never skips), two replicas started by `ci/vllm-serve.sh` on the
qwen3 demo model (`make-demo-model --arch qwen3`).

Scores are compared with a plain transformers forward on the same weights (fp32 on both sides; the bound
asserted is 1e-4, the difference measured is ~1e-6) and with blink's own executor (conftest.py's `qwen3_engine`),
prompt logprobs and a chat stream with the local engine, and routing by what vLLM itself counts (its /metrics):
the same state to the same replica, a busy one spilling to the next, then 529. blink's own `serve --engine vllm` in
front of the replicas, a hung replica and failover are test_vllm_serve.py's (its last tests kill a replica, so
conftest.py runs test_router.py, which shares the replicas, just before this file, and test_vllm_serve.py right
after it).

Cost: the venv (cached after the first build: a few seconds), ~100-150 s for the two replicas to start side by
side, ~25 s for each one's first request (conftest.py's session-scoped `vllm_replicas`, ci/tests/helpers/vllm.py);
the timings land in ci/artifacts/vllm-timing.json.
"""

from __future__ import annotations

import re
from dataclasses import replace

import httpx
import pytest

from blink.errors import Overloaded
from blink.plan import GenerationParams
from helpers.vllm import DECISIONS, LONG_STATE, max_difference
from helpers.vllm import VLLM_TIMING as TIMING

# the first test pays for the module's set-up: building .venv-vllm on a clean machine (~6 min) and the replicas
pytestmark = [pytest.mark.timeout(2400), pytest.mark.e2e, pytest.mark.vllm, pytest.mark.slow]


def plain_logprobs(model, prompt) -> list[list[float]]:
    """The reference: one transformers forward of the whole prompt, full-vocabulary log-softmax at each read.
    Logits only at the reads (`logits_to_keep`): a 200-option prompt's logits at every position are ~1 GB."""
    import torch

    positions = torch.tensor([r.position for r in prompt.reads])
    with torch.no_grad():
        logits = model(torch.tensor([prompt.ids]), logits_to_keep=positions).logits[0]
        logprobs = torch.log_softmax(logits.float(), dim=-1)
    return [(logprobs[i, r.label_ids] / r.temperature).tolist() for i, r in enumerate(prompt.reads)]


def test_scores_equal_a_plain_forward(vllm_replicas, qwen3_engine):
    from blink.decide.answers import softmax
    from blink.vllm import Replicas, VllmScorer

    # nothing is measured yet: the first calls' timeouts come from the assumed speed, which an operator of CPU
    # replicas on a shared 2-core machine sets to what they do (the 200-option decision's chunks took ~20 s here)
    with Replicas([url for url, _ in vllm_replicas], assumed_s_per_token=0.1) as replicas:
        scorer = VllmScorer(replicas)
        prepared = [qwen3_engine.prepare(body) for body in DECISIONS]
        out = scorer.score([p.prompts for p in prepared])
        worst = 0.0
        for p, scored in zip(prepared, out):
            assert scored.error is None, scored.error
            scores = scored.scores
            reference = [plain_logprobs(qwen3_engine.executor.model, prompt) for prompt in p.prompts]
            worst = max(worst, max_difference(scores, reference))
            local = qwen3_engine.executor.score([p.prompts])[0]  # blink's own engine: logits, not logprobs
            for got, want, ours in zip(scores, reference, local):
                for g, w, o in zip(got, want, ours):
                    assert max(abs(x - y) for x, y in zip(softmax(g), softmax(w))) < 1e-5
                    assert max(abs(x - y) for x, y in zip(softmax(g), softmax(o))) < 1e-5
            assert list(qwen3_engine.answer(p, scores)) == [q.name for q in p.decision.questions]
        TIMING["max_logprob_difference"] = worst
        assert worst < 1e-4, worst


def test_prompt_logprobs_equal_the_local_engine(vllm_replicas, qwen3_engine):
    """Echo's and loglikelihood's prompt logprobs through the replicas (`prompt_logprobs`, one request for a
    question and its answers) equal blink's own executor on the same weights: each token's logprob, the most likely
    token after each prompt (vLLM's greedy token) and the ranks."""
    from blink.vllm import Replicas
    from blink.vllm.prompt_logprobs import prompt_logprobs

    tokenizer = qwen3_engine.tokenizer
    context = tokenizer("Question: what do cats say?\nAnswer:", add_special_tokens=False)["input_ids"]
    prompts = [context + tokenizer(a, add_special_tokens=False)["input_ids"] for a in (" meow", " woof", " moo")]
    with Replicas([url for url, _ in vllm_replicas], assumed_s_per_token=0.1) as replicas:
        served = prompt_logprobs(replicas, prompts, 2)
    local = qwen3_engine.prompt_logprobs(prompts, 2, ranks=True)
    for prompt, ours, theirs in zip(prompts, local, served):
        assert max(abs(x - y) for x, y in zip(ours.token_logprobs, theirs.token_logprobs)) < 1e-4
        assert ours.top[-1][0][0] == theirs.top[-1][0][0]
        # a random model's distributions are full of near-ties: a rank may differ by as many tokens as lie within
        # twice the engines' agreement (1e-4, either side may move) of the token's logprob, and by no more
        for i, band in enumerate(tie_bands(qwen3_engine.executor.model, prompt, 2e-4)):
            assert abs(ours.ranks[i] - theirs.ranks[i]) <= band, (i, ours.ranks[i], theirs.ranks[i], band)


def tie_bands(model, prompt: list[int], tolerance: float) -> list[int]:
    """Per scored token (token i+1 given the tokens before it): how many other tokens' logprobs lie within
    `tolerance` of its own, in one plain transformers forward of the whole prompt."""
    import torch

    with torch.no_grad():
        logprobs = torch.log_softmax(model(torch.tensor([prompt])).logits[0].float(), dim=-1)
    bands = []
    for i, token in enumerate(prompt[1:]):
        own = logprobs[i, token]
        bands.append(int(((logprobs[i] - own).abs() <= tolerance).sum()) - 1)
    return bands


def test_more_labels_than_one_vllm_request_takes(vllm_replicas, qwen3_engine):
    from blink.vllm import Replicas, VllmScorer

    body = {
        "state": "Where should the parcel go?",
        "questions": {
            "city": {
                "type": "choice",
                "instructions": "Pick the city.",
                "criteria": {f"city {i}": None for i in range(200)},
            }
        },
    }
    prepared = qwen3_engine.prepare(body)
    assert len(prepared.prompts[0].reads[0].label_ids) == 200  # vLLM takes 128 per request
    with Replicas([vllm_replicas[0][0]]) as replicas:
        (scored,) = VllmScorer(replicas).score([prepared.prompts])
    assert scored.error is None, scored.error
    scores = scored.scores
    reference = [plain_logprobs(qwen3_engine.executor.model, prompt) for prompt in prepared.prompts]
    assert max_difference(scores, reference) < 1e-4


def metric(url: str, name: str) -> float:
    """The sum of one of vLLM's own counters over its label sets."""
    text = httpx.get(url + "/metrics", timeout=10).text
    return sum(float(m.group(1)) for m in re.finditer(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.MULTILINE))


def test_the_same_state_goes_to_the_same_replica(vllm_replicas, qwen3_engine):
    from blink.vllm import Replicas, VllmScorer

    urls = [url for url, _ in vllm_replicas]
    with Replicas(urls) as replicas:
        scorer = VllmScorer(replicas)
        asks = [
            {"state": LONG_STATE, "questions": {f"q{i}": {"type": "noul", "instructions": f"Question {i}?"}}}
            for i in range(6)
        ]
        before = {url: metric(url, "vllm:request_success_total") for url in urls}
        hits_before = {url: metric(url, "vllm:prefix_cache_hits_total") for url in urls}
        for body in asks:  # one at a time: no load, so affinity alone decides
            (scored,) = scorer.score([qwen3_engine.prepare(body).prompts])
            assert scored.error is None
        served = {url: metric(url, "vllm:request_success_total") - before[url] for url in urls}
        hits = {url: metric(url, "vllm:prefix_cache_hits_total") - hits_before[url] for url in urls}
        assert sorted(served.values()) == [0, 6], served  # vLLM's own count: all six on one replica
        home = max(served, key=served.get)
        assert hits[home] >= 5 * 16, hits  # the state's blocks were reused by the five later questions

        # many different states use both replicas (rendezvous hashing spreads keys)
        others = [
            {"state": f"Ticket {i}: " + LONG_STATE[i:], "questions": {"q": {"type": "noul", "instructions": "Late?"}}}
            for i in range(16)
        ]
        counts = {url: r["served"] for url, r in zip(urls, replicas.health(probe=False)["replicas"])}
        for body in others:
            scorer.score([qwen3_engine.prepare(body).prompts])
        after = {r["url"]: r["served"] for r in replicas.health(probe=False)["replicas"]}
        assert all(after[url] > counts[url] for url in urls), (counts, after)


def test_a_busy_replica_spills_to_the_next_and_then_529(vllm_replicas, qwen3_engine):
    from blink.vllm import Replicas, VllmScorer
    from blink.vllm.affinity import route_for

    urls = [url for url, _ in vllm_replicas]
    with Replicas(urls, max_in_flight=1) as replicas:
        scorer = VllmScorer(replicas)
        plan = qwen3_engine.prepare(DECISIONS[1]).prompts  # long enough (> 64 tokens) for the prefix table
        home, other = replicas.order(scorer.route(plan))
        # hold the home replica busy with an open stream that prefers it too
        prompt = next(p for p in ([n + 1] * 8 for n in range(64)) if replicas.order(route_for([p]))[0] is home)
        held = [replicas.start_stream(route_for([prompt]), {"prompt": prompt, "max_tokens": 2000, "stream": True})]
        assert held[0][0] is home
        (scored,) = scorer.score([plan])
        assert scored.error is None
        assert (home.served, other.served) == (0, 1)  # spilled to the next replica of its order
        # both busy: no replica can take it -> Overloaded (529 with Retry-After)
        held.append(
            replicas.start_stream(route_for([[7] * 8]), {"prompt": [7] * 8, "max_tokens": 2000, "stream": True})
        )
        assert {r.url for r, _ in held} == set(urls)
        (scored,) = scorer.score([plan])
        assert isinstance(scored.error, Overloaded), scored.error
        with pytest.raises(Overloaded) as refused:
            scorer.score_one(plan)
        assert refused.value.status == 529 and refused.value.headers["Retry-After"]
        for replica, response in held:
            replicas.finish(replica, response)
        assert [r["in_flight"] for r in replicas.health(probe=False)["replicas"]] == [0, 0]
        # free again: the state now follows its prefix to where it was last served
        served = home.served, other.served  # the held streams count as served once closed
        (scored,) = scorer.score([plan])
        assert scored.error is None and (home.served, other.served) == (served[0], served[1] + 1)


def test_chat_streams_the_same_text_as_the_local_engine(vllm_replicas, qwen3_engine):
    from blink.generate.chat_engine import ChatEnd, ChatEngine
    from blink.vllm import Replicas, VllmChat

    chat = ChatEngine(qwen3_engine.loaded)
    rendered = chat.render([{"role": "user", "content": "Write a short note about parcels."}])
    params = GenerationParams(max_tokens=24, temperature=0)
    local = list(chat.generate(rendered.ids, params))
    with Replicas([url for url, _ in vllm_replicas]) as replicas:
        remote = list(VllmChat(replicas, chat).generate(rendered.ids, params))
        assert all(isinstance(d, str) for d in remote[:-1]) and isinstance(remote[-1], ChatEnd)
        assert "".join(remote[:-1]) == "".join(local[:-1])  # greedy on the same weights: the same text
        end = remote[-1]
        assert (end.finish_reason, end.prompt_tokens, end.completion_tokens) == ("length", len(rendered.ids), 24)
        # a stop string ends it there, unsent; the consumer closing early ends the stream (and frees the replica)
        text = "".join(local[:-1])
        stop = text[len(text) // 2 : len(text) // 2 + 3]
        if stop.strip():
            cut = list(VllmChat(replicas, chat).generate(rendered.ids, replace(params, stop=(stop,))))
            assert "".join(cut[:-1]) == text[: text.index(stop)] and cut[-1].finish_reason == "stop"
        generator = VllmChat(replicas, chat).generate(rendered.ids, GenerationParams(max_tokens=2000, temperature=0))
        next(generator)
        generator.close()
        assert sum(r["in_flight"] for r in replicas.health(probe=False)["replicas"]) == 0
