"""What one request may ask for. Every limit refuses (422/413) rather than truncates.

Plain dataclasses with no imports, so the settings schema (and `build.py`, which reads it) takes its defaults
from here without loading the image or model libraries.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    max_questions: int = 1000  # questions per request (Gemini's documented maximum; OpenAI's is 400)
    max_prompts: int = 128  # prompts per completion request (a list of prompts, one choice each)
    max_options: int = 255  # options per choice question (TypeSafe's documented maximum)
    max_levels: int = 255  # levels per score question (Gemini's documented maximum, as options)
    max_context_tokens: int = 32768  # one prompt: the state plus one question, rendered
    max_request_tokens: int = 65536  # tokens the model runs for the whole request (shared prefix counted once)
    max_body_bytes: int = 16 * 1024 * 1024  # the body as sent (compressed or not)
    max_decoded_bytes: int = 64 * 1024 * 1024  # the body after decompression
    max_documents: int = 64  # documents (or pairs) one rerank or score request ranks: a decision each
    max_moderation_inputs: int = 32  # inputs of one /v1/moderations request (each one decision)


@dataclass(frozen=True)
class ImageLimits:
    max_images: int = 2
    max_image_bytes: int = 8 * 1024 * 1024
    max_image_pixels: int = 1920 * 1088  # after resizing: larger images are scaled down to this
    max_image_source_pixels: int = 20_000_000  # declared size before decoding: larger is refused


PUBLIC = ("max_questions", "max_options", "max_levels", "max_context_tokens", "max_request_tokens", "max_body_bytes")


def public(limits: Limits) -> dict:
    """What one decision request may ask, on every wire (each a knob): what /v1/models and /v1beta/models list."""
    return {name: getattr(limits, name) for name in PUBLIC}
