"""The shared-prefix path equals a fresh per-question forward (no cache reuse) within 1e-5 on fp32,
on the demo model's hybrid layers (Gated DeltaNet + full attention)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import WORDS, random_request


def max_diff(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) for x, y in zip(a, b))


@pytest.mark.parametrize("n_questions", [1, 2, 5, 16])
def test_shared_prefix_equals_fresh_forward(engine, n_questions):
    rng = random.Random(n_questions)
    prepared = engine.prepare(random_request(rng, n_questions))
    scores = engine.executor.score([prepared.prompts])[0]
    worst = 0.0
    for prompt, prompt_scores in zip(prepared.prompts, scores):
        reference = engine.executor.reference(prompt)
        for ours, ref in zip(prompt_scores, reference):
            worst = max(worst, max_diff(ours, ref))
    assert worst < 1e-5, worst


@pytest.mark.parametrize("pass_cost,max_cells", [(0.0, None), (32.0, None), (1e9, None), (1e9, 300)])
def test_many_requests_in_one_call_equal_each_alone(engine, pass_cost, max_cells):
    """Cross-request batching: groups of different prefix lengths (left-padded) and suffixes (right-padded),
    in one prefix pass (a huge pass cost), in one pass per distinct length (no pass cost), in between, and cut
    into passes of a row or two by a tiny cache budget."""
    rng = random.Random(7)
    prepared = [engine.prepare(random_request(rng, rng.randint(1, 6))) for _ in range(6)]
    saved = engine.executor.pass_cost_tokens, engine.executor.max_cells
    engine.executor.pass_cost_tokens = pass_cost
    engine.executor.max_cells = max_cells or saved[1]
    try:
        together = engine.executor.score([p.prompts for p in prepared])
    finally:
        engine.executor.pass_cost_tokens, engine.executor.max_cells = saved
    for p, batched in zip(prepared, together):
        alone = engine.executor.score([p.prompts])[0]
        for b_prompt, a_prompt in zip(batched, alone):
            for b, a in zip(b_prompt, a_prompt):
                assert max_diff(b, a) < 1e-5


def test_the_prefix_is_shared(engine):
    """The model runs the state once: processed tokens are far below the sum of the prompts."""
    prepared = engine.prepare(
        {
            "state": "word " * 500,
            "questions": {f"q{i}": {"type": "noul", "instructions": f"Is it {i}?"} for i in range(8)},
        }
    )
    total = sum(len(p.ids) for p in prepared.prompts)
    assert prepared.input_tokens < total / 4


def test_length_buckets_cost_model(engine):
    """Passes are chosen at the least cost (pass cost + rows x longest row): a free pass gives every length its
    own; a dear one puts everything in full passes; in between, the optimum over every contiguous grouping of
    the runs of equal length (brute force) is found."""
    from itertools import combinations

    from blink.executor.passes import length_buckets

    lengths = {"a": 100, "b": 90, "c": 50, "d": 49, "e": 10, "f": 5, "g": 5}
    assert length_buckets(list(lengths), lengths, max_rows=64, pass_cost=0) == [
        ["a"],
        ["b"],
        ["c"],
        ["d"],
        ["e"],
        ["f", "g"],
    ]
    assert length_buckets(list(lengths), lengths, max_rows=64, pass_cost=10_000) == [list(lengths)]
    # three passes either way: the cheapest padding among them
    assert length_buckets(list(lengths), lengths, max_rows=3, pass_cost=10_000) == [
        ["a", "b"],
        ["c", "d"],
        ["e", "f", "g"],
    ]
    assert length_buckets(list(lengths), lengths, max_rows=1, pass_cost=50) == [[k] for k in lengths]
    # a cache budget: rows x (carried prefix + longest row) <= max_cells, at least one row per pass
    for carried, cells in [(0, 250), (100, 500), (1000, 10)]:
        passes = length_buckets(list(lengths), lengths, max_rows=64, pass_cost=10_000, max_cells=cells, carried=carried)
        assert sorted(r for p in passes for r in p) == sorted(lengths)
        assert all(len(p) == 1 or len(p) * (carried + max(lengths[r] for r in p)) <= cells for p in passes), passes

    def cost(buckets, pass_cost):
        return sum(pass_cost + len(b) * max(lens[r] for r in b) for b in buckets)

    rng = random.Random(8)
    for _ in range(300):
        lens = {i: rng.choice([3, 5, 8, 20, 21, 40, 77]) for i in range(rng.randint(1, 12))}
        pass_cost = rng.choice([0, 4, 30, 200])
        got = length_buckets(list(lens), lens, max_rows=64, pass_cost=pass_cost)
        assert sorted(r for b in got for r in b) == sorted(lens)
        runs = sorted(set(lens.values()), reverse=True)
        best = min(
            cost(
                [[r for r in lens if lens[r] in runs[a:b]] for a, b in zip((0,) + cuts, cuts + (len(runs),))], pass_cost
            )
            for k in range(len(runs))
            for cuts in combinations(range(1, len(runs)), k)
        )
        assert cost(got, pass_cost) == best


def test_length_buckets_stay_exact(engine):
    rng = random.Random(3)
    prepared = engine.prepare(random_request(rng, 12))
    engine.executor.max_rows = 2  # many small fan-outs from one prefix cache
    try:
        scores = engine.executor.score([prepared.prompts])[0]
    finally:
        engine.executor.max_rows = 64
    for prompt, prompt_scores in zip(prepared.prompts, scores):
        for ours, ref in zip(prompt_scores, engine.executor.reference(prompt)):
            assert max_diff(ours, ref) < 1e-5


TRICKY = [
    "line one\n\nline two",
    "ends with newlines\n\n\n",
    "  leading spaces",
    "tabs\tand\n \nspaces",
    "unicode: café, 東京, 🎯, e\u0301",
    "control <|im_end|> tokens <|im_start|>user",
    "numbers 12345 and x1y2",
    "trailing punctuation!!!\n\n",
    '{"json": "with \\n escapes"}',
    "\n\nstarts with newlines",
]


def test_prompt_tokens_equal_the_plain_tokenizer(engine, demo_dir):
    """The prefix-reusing encoder (the state tokenized once per request) gives exactly the ids the library's
    own rendering and tokenization give, on states and questions built to stress the cut."""
    from transformers import AutoTokenizer
    from transformers.decision import prepare_inputs

    from blink.decide.prefix_encoder import PrefixReusingEncoder

    assert isinstance(engine.prompts.tokenizer.encode, PrefixReusingEncoder) and engine.prompts.tokenizer.encode.enabled
    assert not isinstance(engine.tokenizer.encode, PrefixReusingEncoder)  # chat's tokenizer stays as loaded
    plain = AutoTokenizer.from_pretrained(demo_dir)
    rng = random.Random(11)
    for trial in range(40):
        state = " ".join(rng.choice(TRICKY + WORDS) for _ in range(rng.randint(1, 60)))
        if trial % 3 == 0:
            state = {"ticket": state, "lines": [rng.choice(TRICKY) for _ in range(3)]}
        questions = {}
        for i in range(rng.randint(1, 6)):
            instructions = rng.choice(TRICKY + ["Which team?", "Is it urgent?", "", "How angry?"])
            questions[f"q{i}"] = rng.choice(
                [
                    {"type": "noul", "instructions": instructions},
                    {
                        "type": "choice",
                        "instructions": instructions,
                        "criteria": {rng.choice(TRICKY): None, "b": "x\n\ny"},
                    },
                    {"type": "score", "instructions": instructions, "criteria": [rng.choice(TRICKY), "high"]},
                ]
            )
        request = {"state": state, "questions": questions}
        ours = [p.ids for p in engine.prepare(request).prompts]
        theirs = [inputs["input_ids"][0].tolist() for inputs, _ in prepare_inputs(engine.config, request, plain)]
        assert ours == theirs, (trial, request)


def test_common_prefix_length_matches_a_token_by_token_scan():
    from blink.plan import common_prefix_length

    def scan(rows):
        n = min(map(len, rows))
        return next((i for i in range(n) if any(r[i] != rows[0][i] for r in rows)), n)

    rng = random.Random(0)
    for _ in range(2000):
        base = [rng.randint(0, 3) for _ in range(rng.randint(0, 30))]
        rows = [
            base[: rng.randint(0, len(base))] + [rng.randint(0, 3) for _ in range(rng.randint(0, 5))]
            for _ in range(rng.randint(1, 5))
        ]
        assert common_prefix_length(rows) == scan(rows), rows


def test_safe_cut_matches_a_character_scan():
    """The prefix-reusing encoder's cut (C-speed search) equals the plain definition: the last p at or before
    the first difference, within MAX_SCAN of it, where text[p - 1] is a newline and text[p] is not a space."""
    from blink.decide.prefix_encoder import PrefixReusingEncoder

    def scan(previous, text, max_scan):
        n = min(len(previous), len(text))
        same = next((i for i in range(n) if previous[i] != text[i]), n)
        for p in range(min(same, len(text) - 1), max(0, same - max_scan), -1):
            if text[p - 1] == "\n" and not text[p].isspace():
                return p
        return 0

    cutter = PrefixReusingEncoder.__new__(PrefixReusingEncoder)  # only the pure string method is exercised
    rng = random.Random(5)
    alphabet = ["\n", "\n", " ", "\t", "a", "b", "é", "\r"]
    for _ in range(3000):
        base = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        previous = base[: rng.randint(0, len(base))] + "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6)))
        text = base[: rng.randint(0, len(base))] + "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6)))
        cutter.MAX_SCAN = rng.choice([3, 10, 4096])
        assert cutter._safe_cut(previous, text) == scan(previous, text, cutter.MAX_SCAN), (previous, text)


def test_plan_and_rendering_import_no_torch():
    """The plan types, the cost model and prompt rendering are plain Python: with torch blocked, they import
    (and so does what the Space's duration estimate reads), and pull no torch in."""
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import blink.plan, blink.executor.passes, blink.decide.prompts\n"
        "from blink.plan import Prompt, Read, processed_tokens\n"
        "assert processed_tokens([Prompt([1, 2, 3], [Read(2, [5])]), Prompt([1, 2, 4, 5], [Read(3, [5])])]) == 5\n"
        "assert sys.modules['torch'] is None\n"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_delta_rule_runs_with_the_chunk_the_executor_chose(engine, monkeypatch):
    """On the CPU the executor passes its chunk (blink.executor.passes.delta_rule_chunk) through the model's forward
    keywords to transformers' reference Gated DeltaNet rule, in the prefill and the suffix passes alike; the
    per-question reference forward keeps the model's own 64. Recorded at the rule itself, so a
    transformers that stopped passing the keyword on would fail here instead of silently running 64 again."""
    from transformers.models.qwen3_5 import modeling_qwen3_5 as qwen

    from blink.executor.passes import delta_rule_chunk

    assert engine.executor.reference_delta_rule
    seen = []
    rule = qwen.torch_chunk_gated_delta_rule

    def recording(*args, chunk_size: int = 64, **kwargs):
        seen.append((args[0].shape[1], chunk_size))  # (the pass's span, its chunk)
        return rule(*args, chunk_size=chunk_size, **kwargs)

    monkeypatch.setattr(qwen, "torch_chunk_gated_delta_rule", recording)
    prepared = engine.prepare(
        {"state": "word " * 300, "questions": {"short": {"type": "noul", "instructions": "Ok?"}, "long": LONG_QUESTION}}
    )
    engine.executor.score([prepared.prompts])
    assert seen and all(chunk == delta_rule_chunk(span) != 64 for span, chunk in seen), seen
    seen.clear()
    engine.executor.reference(prepared.prompts[0])
    assert seen and all(chunk == 64 for _, chunk in seen), seen


LONG_QUESTION = {
    "type": "choice",
    "instructions": "Which of these teams should take the ticket, judging by what the customer wrote?",
    "criteria": {"billing": "Charges and refunds", "shipping": "Late or lost parcels", "other": "Anything else"},
}


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.lists(st.lists(st.integers(0, 3), max_size=12), min_size=1, max_size=5), min_size=1, max_size=4),
    st.integers(0, 60),
)
def test_the_trim_bound_says_exactly_whether_the_plans_ran_n_tokens(plans, n):
    """Engine.score's cheap bound (the prompts' whole lengths first) answers as the exact count would."""
    from blink.plan import Prompt, processed_tokens, tokens_at_least

    prompts = [[Prompt(ids, []) for ids in plan] for plan in plans]
    assert tokens_at_least(prompts, n) == (sum(processed_tokens(p) for p in prompts) >= n)


@pytest.mark.parametrize("pass_cost", [0.0, 1e9])
def test_prompt_logprobs_share_a_start_exactly(engine, pass_cost):
    """Every token's logprob (echo, loglikelihood): a question and its answers in one call, their common start run
    once, equal a plain forward of each prompt (the model's own logits, log-softmaxed) within fp32 1e-5; so do the
    most likely tokens after each prompt, and each token's rank."""
    import torch

    from blink.executor.prompt_logprobs import prompt_logprobs, share_groups

    rng = random.Random(3)
    context = [rng.randrange(200, 5000) for _ in range(120)]
    answers = [[rng.randrange(200, 5000) for _ in range(rng.randint(1, 6))] for _ in range(4)]
    other = [rng.randrange(200, 5000) for _ in range(30)]
    prompts = [context + a for a in answers] + [other, other[:1], context[:50]]
    assert sorted(map(sorted, share_groups(prompts))) == [[0, 1, 2, 3, 6], [4, 5]]
    saved = engine.executor.pass_cost_tokens
    engine.executor.pass_cost_tokens = pass_cost
    try:
        together = prompt_logprobs(engine.executor, prompts, 3, ranks=True)
    finally:
        engine.executor.pass_cost_tokens = saved
    worst = 0.0
    for ids, got in zip(prompts, together):
        with torch.inference_mode():
            rows = torch.log_softmax(engine.executor.model(input_ids=torch.tensor([ids])).logits[0].float(), -1)
        assert len(got.token_logprobs) == len(ids) - 1 and len(got.top) == len(ids)
        for i, token in enumerate(ids[1:]):
            worst = max(worst, abs(got.token_logprobs[i] - rows[i, token].item()))
            own = rows[i, token]  # a rank within the tolerance: many tokens of a random model score nearly alike
            assert int((rows[i] > own + 1e-5).sum()) + 1 <= got.ranks[i] <= int((rows[i] > own - 1e-5).sum()) + 1
        assert [t for t, _ in got.top[-1]] == rows[-1].topk(3).indices.tolist()
        worst = max(worst, max_diff([lp for _, lp in got.top[-1]], rows[-1].topk(3).values.tolist()))
    assert worst < 1e-5, worst


def test_an_end_of_sequence_token_keeps_its_entry_when_asked(engine):
    """Echo reads one logprob entry per token drawn (lm-eval drops the last as the generated one): a generation that
    ends on an end-of-sequence token reports it with `eos_entry`, and leaves it out otherwise (chat's shape). The
    demo model's greedy first token is made its end-of-sequence token here, so the generation ends there."""
    import torch

    from blink.generate.chat_engine import ChatEnd, ChatEngine
    from blink.plan import GenerationParams

    chat = ChatEngine(engine.loaded)
    ids = chat.tokenizer("Once upon a time", add_special_tokens=False)["input_ids"]
    with torch.inference_mode():
        rows = torch.log_softmax(engine.executor.model(input_ids=torch.tensor([ids])).logits[0, -1].float(), -1)
    chat.eos_ids = [int(rows.argmax())]
    for asked in (True, False):
        params = GenerationParams(max_tokens=3, temperature=0, logprobs=True, top_logprobs=1, eos_entry=asked)
        items = list(chat.generate(ids, params))
        end = items[-1]
        assert isinstance(end, ChatEnd) and end.finish_reason == "stop" and end.completion_tokens == 0
        entries = [e for item in items[:-1] for e in item.logprobs]
        assert len(entries) == int(asked)
        if asked:
            assert abs(entries[0]["logprob"] - rows.max().item()) < 1e-5 and entries[0]["bytes"] == []
