"""The image processor's output split per image: one `plan.Image` (its patches and grid) per occurrence in a prompt.

Torch-free on purpose (the tensors' own methods do the work): prompt rendering imports it, and rendering must run
where torch is not imported (blink.plan's contract).
"""

from __future__ import annotations

import hashlib

from blink.plan import Image


def split_images(inputs: dict, shared: dict) -> list[Image]:
    """The prompt's images, one `Image` per occurrence, the same object for the same pixels across prompts."""
    if "pixel_values" not in inputs:
        return []
    out, start = [], 0
    for grid in inputs["image_grid_thw"].tolist():
        patches = grid[0] * grid[1] * grid[2]
        pixels = inputs["pixel_values"][start : start + patches].contiguous()
        start += patches
        key = hashlib.sha256(pixels.numpy().tobytes()).hexdigest()[:32] + "-" + "x".join(map(str, grid))
        out.append(shared.setdefault(key, Image(key, pixels, grid)))
    return out
