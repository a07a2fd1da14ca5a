"""blink's own engine beyond Qwen3.5 (issue 16): standard-RoPE decoders must be served exactly, and a model the
executor can't serve must be refused at start with a clear message.

Both are expected to fail until the executor is made general (strict xfail: the day they pass, the marker
must go). The recipe is in the issue 16 report: in `Executor._forward`, pass the 4-row multimodal positions
only to models whose rotary embedding is multimodal (`"mrope_section" in config.rope_parameters`) and the plain
[rows, tokens] sequence positions to every other model; check the architecture in `Executor.__init__`.
"""

from __future__ import annotations

import pytest

from blink.engine import WARMUP
from blink.errors import EngineFailure

NOT_YET = "the executor always sends Qwen3.5's 4-row multimodal rotary positions (see the issue 16 report)"


@pytest.fixture(scope="module")
def standard_rope_dirs(tmp_path_factory) -> dict:
    """A random Qwen3ForCausalLM (the qwen3 demo) and a random LlamaForCausalLM, with the demo tokenizer."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from blink.demo import build_tokenizer, make_demo_model

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


@pytest.mark.xfail(strict=True, raises=EngineFailure, reason=NOT_YET)
@pytest.mark.parametrize("arch", ["qwen3", "llama"])
def test_the_engine_serves_a_standard_rope_model_exactly(standard_rope_dirs, arch):
    from blink.engine import Engine
    from blink.loading import load

    engine = Engine(load(str(standard_rope_dirs[arch])))
    assert engine.warmup()
    # a shared-prefix request batched with a shorter one: prefix pass, left padding, fan-out, suffix pass
    first, second = engine.prepare(WARMUP), engine.prepare({**WARMUP, "state": "Short."})
    fast = engine.executor.score([first.prompts, second.prompts])
    for prepared, scores in zip((first, second), fast):
        for prompt, got in zip(prepared.prompts, scores):
            want = engine.executor.reference(prompt)
            assert max(abs(a - b) for g, w in zip(got, want) for a, b in zip(g, w)) < 1e-5


@pytest.mark.xfail(
    strict=True,
    raises=AttributeError,
    reason="no architecture check yet: GPT-2 fails with an AttributeError, not a refusal naming it",
)
def test_a_model_the_executor_cannot_serve_is_refused_at_start(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    from blink.demo import build_tokenizer
    from blink.engine import Engine
    from blink.loading import load

    tokenizer = build_tokenizer()
    GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=1, n_head=2)).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    with pytest.raises(SystemExit, match="GPT2LMHeadModel"):
        Engine(load(str(tmp_path)))
