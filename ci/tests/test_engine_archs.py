"""blink's own engine beyond Qwen3.5's hybrid layers: standard-RoPE decoders (Qwen3, Llama) are served exactly
(the shared-prefix path equals a fresh forward, the prefix-state cache changes nothing, chat generates what
transformers' greedy search generates), and a model the executor can't drive is refused at start by name."""

from __future__ import annotations

import random

import pytest

from blink.decide.planner import WARMUP
from blink.errors import StartupError
from blink.plan import GenerationParams
from helpers import check_resumes_share_and_keep_saved_states, random_request, worst

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def standard_rope_dirs(tmp_path_factory) -> dict:
    """A random Qwen3ForCausalLM (the qwen3 demo) and a random LlamaForCausalLM, with the demo tokenizer."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from blink.model.demo import build_tokenizer, make_demo_model

    root = tmp_path_factory.mktemp("archs")
    out = {"qwen3": make_demo_model(root / "qwen3", arch="qwen3")}
    tokenizer = build_tokenizer()
    torch.manual_seed(0)
    llama = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=32,
            tie_word_embeddings=True,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
    )
    llama.save_pretrained(root / "llama")
    tokenizer.save_pretrained(root / "llama")
    out["llama"] = root / "llama"
    return out


@pytest.fixture(scope="module")
def qwen3_loaded(standard_rope_dirs):
    from blink.model.loading import load

    return load(str(standard_rope_dirs["qwen3"]))


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
def test_the_engine_serves_a_standard_rope_model_exactly(standard_rope_dirs, arch):
    from blink.decide.planner import Engine
    from blink.model.loading import load

    engine = Engine(load(str(standard_rope_dirs[arch])))
    assert not engine.executor.multimodal_rope
    assert engine.warmup()
    # a shared-prefix request batched with a shorter one: prefix pass, left padding, fan-out, suffix pass
    first, second = engine.prepare(WARMUP), engine.prepare({**WARMUP, "state": "Short."})
    fast = engine.executor.score([first.prompts, second.prompts])
    for prepared, scores in zip((first, second), fast):
        for prompt, got in zip(prepared.prompts, scores):
            want = engine.executor.reference(prompt)
            assert max(abs(a - b) for g, w in zip(got, want) for a, b in zip(g, w)) < 1e-5


def test_the_prefix_cache_changes_no_answer_on_plain_attention(qwen3_loaded):
    """The saved states are attention KV only (a DynamicCache): resumed prefixes answer as prefilled ones."""
    from blink.decide.planner import Engine

    on, off = Engine(qwen3_loaded, prefix_cache_bytes=64 << 20), Engine(qwen3_loaded, prefix_cache_bytes=0)
    rng = random.Random(5)
    bodies = [random_request(rng, rng.randint(1, 4)) for _ in range(3)]
    cached = []
    for _ in range(2):  # the second round resumes every state from the cache
        for body in bodies:
            prepared = on.prepare(body)
            (a,), (b,) = on.score([prepared.prompts]), off.score([prepared.prompts])
            assert a.error is None and b.error is None
            assert worst(on.answer(prepared, a.result()), off.answer(prepared, b.result())) <= 1e-6
            cached.append(a.cached_tokens)
    assert cached[:3] == [0] * 3 and all(cached[3:])
    # a batch mixing saved states and a new one, and a longer state resumed from a saved start
    mixed = [on.prepare(body) for body in [bodies[0], random_request(rng, 2), bodies[1]]]
    for prepared, a, b in zip(mixed, on.score([p.prompts for p in mixed]), off.score([p.prompts for p in mixed])):
        assert worst(on.answer(prepared, a.result()), off.answer(prepared, b.result())) <= 1e-6
    assert on.executor.prefix_cache.stats()["entries"] >= 4


def test_resumed_states_are_shared_and_stay_as_saved_on_plain_attention(qwen3_loaded):
    from blink.decide.planner import Engine

    on, off = Engine(qwen3_loaded, prefix_cache_bytes=64 << 20), Engine(qwen3_loaded, prefix_cache_bytes=0)
    check_resumes_share_and_keep_saved_states(on, off, random.Random(22))


def test_chat_generates_on_a_standard_rope_model(qwen3_loaded):
    import torch

    from blink.generate.chat_engine import ChatEnd, ChatEngine

    chat = ChatEngine(qwen3_loaded)
    rendered = chat.render([{"role": "user", "content": "Write a short note about parcels."}])
    out = list(chat.generate(rendered.ids, GenerationParams(max_tokens=16, temperature=0)))
    end = out[-1]
    assert isinstance(end, ChatEnd) and all(isinstance(d, str) for d in out[:-1])
    assert end.prompt_tokens == len(rendered.ids) and 0 < end.completion_tokens <= 16
    # greedy: the same tokens transformers' own search picks
    with torch.inference_mode():
        ids = qwen3_loaded.model.generate(
            torch.tensor([rendered.ids]), max_new_tokens=end.completion_tokens, do_sample=False
        )[0, len(rendered.ids) :]
    assert "".join(out[:-1]) == qwen3_loaded.tokenizer.decode(ids, skip_special_tokens=True)


@pytest.mark.parametrize(
    "arch,loaded_as", [("GPT2LMHeadModel", "GPT2LMHeadModel"), ("BertForMaskedLM", "BertLMHeadModel")]
)
def test_a_model_the_executor_cannot_serve_is_refused_at_start(tmp_path, arch, loaded_as):
    """A decoder outside transformers' Llama-family layout (GPT-2) and an encoder (BERT, which the causal-LM
    loader builds as BertLMHeadModel): refused by the class that was loaded."""
    import transformers

    from blink.decide.planner import Engine
    from blink.model.demo import build_tokenizer
    from blink.model.loading import load

    tokenizer = build_tokenizer()
    if arch == "GPT2LMHeadModel":
        config = transformers.GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=1, n_head=2)
    else:
        config = transformers.BertConfig(
            vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64
        )
    getattr(transformers, arch)(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    with pytest.raises(StartupError, match=loaded_as):
        Engine(load(str(tmp_path)))
