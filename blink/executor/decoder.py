"""The decoder inside a model, as the executor drives it: found and checked at start (`decoder_of`), so a model the
executor cannot serve exactly is refused with the reason before any request."""

from __future__ import annotations

import inspect

from blink.errors import StartupError

# what the executor calls on the decoder: embeddings in, its own cache object, explicit positions and mask
DECODER_INPUTS = ("inputs_embeds", "attention_mask", "position_ids", "cache")


def decoder_of(model) -> tuple:
    """(the decoder the executor drives, the vision model around it or None). A model it cannot serve exactly is
    refused here, at start, with the reason: the executor calls the decoder directly (its cache across passes,
    explicit positions for left-padded prefixes), which only transformers' decoder-only layout offers."""
    name = type(model).__name__
    config = model.config
    if getattr(config, "is_encoder_decoder", False) or not model.can_generate():
        raise StartupError(f"{name} is not a decoder-only language model: blink's engine scores decoders only")
    inner = getattr(model, "model", None)
    if inner is None or model.get_output_embeddings() is None:
        raise StartupError(
            f"{name} does not keep its decoder at `.model` with an LM head (transformers' layout of Llama-family "
            "decoders, which blink's engine drives directly): it cannot be served"
        )
    # a vision-language model keeps its language model inside; a text model is its own
    vision = inner if hasattr(inner, "language_model") else None
    base = inner.language_model if vision is not None else inner
    missing = [p for p in DECODER_INPUTS if p not in inspect.signature(base.forward).parameters]
    if missing:
        raise StartupError(f"{name}'s decoder takes no {', '.join(missing)}: blink's engine cannot drive it")
    if not getattr(base.config, "rope_parameters", None):
        raise StartupError(
            f"{name} has no rotary position embedding: blink's engine continues positions across a cached, "
            "left-padded prefix, which it only does exactly for RoPE decoders"
        )
    return base, vision


def has_linear_attention(config) -> bool:
    """A hybrid decoder (Qwen3.5: Gated DeltaNet layers beside attention)."""
    return "linear_attention" in (getattr(config, "layer_types", None) or ())
