"""Vision: the image processor of a Qwen3.5 vision-language model, and loading its vision tower (the model's
own, or one borrowed from a matching base model at `repo@revision`).

Also the image tensors a vision-language forward takes (pixels, grids, Qwen's 3-D rotary positions), shared
by the decision executor and chat.

Why a processor class of our own: `transformers`' `Qwen3VLProcessor` also builds a video processor, which
needs torchvision; we take images only, so this subclass keeps its image-token expansion and chat-template
handling and skips the video half. Images are preprocessed by the PIL image processor (no torchvision).
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from transformers import ProcessorMixin
from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor

from blink.errors import StartupError

log = logging.getLogger("blink")


def pixels_and_grid(images: list, device) -> tuple[torch.Tensor, torch.Tensor]:
    """The images' (`blink.plan.Image`) patches, concatenated, and their (t, h, w) grids: what the vision tower
    takes."""
    pixels = torch.cat([torch.as_tensor(i.pixel_values) for i in images]).to(device)
    return pixels, torch.tensor([i.grid_thw for i in images], device=device)


def image_inputs(images: list, input_ids: torch.Tensor, image_token_id: int, device) -> dict:
    """A whole-prompt forward's image arguments (the plain path, chat's first step)."""
    pixels, grid = pixels_and_grid(images, device)
    return {
        "pixel_values": pixels,
        "image_grid_thw": grid,
        "mm_token_type_ids": (input_ids == image_token_id).int().to(device),
    }


def image_positions(inner, ids: list[int], images: list, image_token_id: int) -> tuple[torch.Tensor, int]:
    """Qwen's 3-D rotary positions [3, n] of a prompt showing `images` (CPU), and the offset the text after
    it continues from. `inner`: the vision-language model that owns `get_rope_index`."""
    input_ids = torch.tensor([ids])
    types = (input_ids == image_token_id).int()
    grid = torch.tensor([i.grid_thw for i in images])
    positions, deltas = inner.get_rope_index(input_ids, types, image_grid_thw=grid)
    return positions[:, 0], int(deltas.view(-1)[0])


class ImageTextProcessor(Qwen3VLProcessor):
    def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
        ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)
        for name, token in (
            ("image", "<|image_pad|>"),
            ("video", "<|video_pad|>"),
            ("vision_start", "<|vision_start|>"),
            ("vision_end", "<|vision_end|>"),
        ):
            setattr(self, f"{name}_token", token)
            setattr(self, f"{name}_token_id", tokenizer.convert_tokens_to_ids(token))


def renders_images(template: str | None, tokenizer) -> bool:
    if not template:
        return False
    message = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "x"}]}]
    try:
        text = tokenizer.apply_chat_template(
            message, chat_template=template, tokenize=False, add_generation_prompt=True
        )
    except Exception:  # noqa: BLE001 - a template that can't take image parts
        return False
    return "<|image_pad|>" in text


def load_processor(folder: Path, tokenizer, max_pixels: int) -> ImageTextProcessor:
    """The image processor of `folder` (the model's, or the borrowed tower's) with the model's tokenizer, its
    final resize (to whole patches) capped at `max_pixels`. The chat template must place image tokens: the
    model's own, else the tower's; neither refuses to start."""
    from transformers import AutoTokenizer
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    template = tokenizer.chat_template
    if not renders_images(template, tokenizer):
        template = AutoTokenizer.from_pretrained(folder).chat_template
        if not renders_images(template, tokenizer):
            raise StartupError(
                "images: neither the model's chat template nor the vision tower's places image tokens "
                "(<|vision_start|><|image_pad|><|vision_end|>) for image parts"
            )
        tokenizer.chat_template = template  # chat and decisions then render images the same way
        log.info("using the vision tower's chat template, which places image tokens")
    images = Qwen2VLImageProcessorPil.from_pretrained(folder)
    images.size["longest_edge"] = min(images.size["longest_edge"], max_pixels)
    return ImageTextProcessor(images, tokenizer, chat_template=template)


def split_tower(spec: str) -> tuple[str, str | None]:
    """`repo@revision` (or `folder@anything`, or a bare folder) -> (source, revision)."""
    source, sep, revision = spec.rpartition("@")
    if not sep:
        return spec, None
    if not source or not revision:
        raise ValueError(f"--vision-tower must be repo@revision, got {spec!r}")
    return source, revision


def has_vision_tower(folder: Path) -> bool:
    import json

    config = json.loads((folder / "config.json").read_text())
    return "vision_config" in config and (folder / "preprocessor_config.json").exists()


def load_vision_model(root: Path, tower: str | None, dtype):
    """The model as a vision-language model: its own tower, or the text model's weights put into the
    vision-language model of `tower` (a matching base, e.g. Qwen3.5-4B for a Qwen3.5-4B fine-tune)."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    if tower is None:
        if not has_vision_tower(root):
            raise StartupError(
                f"--vision: {root} has no vision tower (config.json vision_config and "
                "preprocessor_config.json); borrow one with --vision-tower repo@revision"
            )
        return AutoModelForImageTextToText.from_pretrained(root, dtype=dtype), root
    source, revision = split_tower(tower)
    folder = Path(source) if Path(source).is_dir() else Path(_download(source, revision))
    if not has_vision_tower(folder):
        raise StartupError(f"--vision-tower {tower}: no vision tower there")
    vl = AutoModelForImageTextToText.from_pretrained(folder, dtype=dtype)
    text = AutoModelForCausalLM.from_pretrained(root, dtype=dtype)
    language = {k.removeprefix("model."): v for k, v in text.state_dict().items() if k.startswith("model.")}
    try:
        vl.model.language_model.load_state_dict(language, strict=True)
    except RuntimeError as exc:
        raise StartupError(f"--vision-tower {tower} does not match this model's language model: {exc}") from None
    vl.lm_head.weight = text.lm_head.weight if not vl.config.tie_word_embeddings else vl.lm_head.weight
    log.info("vision tower borrowed from %s", tower)
    return vl, folder


def _download(repo: str, revision: str | None) -> str:
    from huggingface_hub import snapshot_download

    return snapshot_download(repo, revision=revision)
