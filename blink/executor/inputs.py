"""What the executor's passes feed the decoder, per prompt: token embeddings with each image's features in place of
its image tokens, rotary positions (Qwen's 2-D grid for images, 0..n-1 for text) and the keys prompts share a prefix
by (image tokens tagged by their image). For text-only prompts these reduce to token embeddings and 0..n-1
positions. `Inputs` is one call's groups and what every step reads about them."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from blink.executor.vision import image_positions, pixels_and_grid
from blink.plan import Prompt


@dataclass
class Inputs:
    """One call's groups and what every step reads about them (computed once, before the first pass)."""

    groups: list[list[Prompt]]
    prefix_len: list[int]  # per group: its prompts' common prefix (a lone prompt is all prefix)
    features: dict  # image key -> its vision features (the tower runs once the resumed prefixes are known)
    positions: dict  # id(prompt) -> the prompt's multimodal rotary positions [3, L] (unused by standard RoPE)
    spans: dict  # id(prompt) -> (image, first token, token count) per image (see _image_spans)
    keys: dict | None = None  # group -> its prefix's cache keys, for the groups whose prefix is saved
    systems: dict | None = None  # group -> where its system prompt ends (a second save point), for those that have one
    saves: bool = True  # False: saved states are read; one is written only where it repeats (bulk rows)
    repeats: frozenset = frozenset()  # with `saves` False: the groups whose prefix bulk rows brought before

    def saving(self, g: int) -> bool:
        """Whether group `g`'s prefix is saved: every group's, or, for bulk rows, one that repeats."""
        return self.saves or g in self.repeats


class PromptInputs:
    """The Executor's multimodal helpers (a base class of it): they read its `embed`, `vision`, `image_token_id`
    and `device`."""

    def _encode_images(self, inputs: Inputs, resumed: dict) -> dict:
        """Vision features per distinct image the call's passes embed, the vision tower run once for all of them.
        An image whose tokens all lie inside a group's resumed prefix is not embedded again, so it is not run."""
        unique = {}
        for g, prompts in enumerate(inputs.groups):
            start = resumed[g].length if g in resumed else 0
            for prompt in prompts:
                for image, first, count in inputs.spans[id(prompt)]:
                    if first + count > start:
                        unique.setdefault(image.key, image)
        if not unique:
            return {}
        if self.vision is None:
            raise ValueError("this model has no vision tower")
        images = list(unique.values())
        pixels, grid = pixels_and_grid(images, self.device)
        features = self.vision.get_image_features(pixels, grid, return_dict=True).pooler_output
        return {image.key: f for image, f in zip(images, features)}

    def _image_spans(self, prompt: Prompt) -> list[tuple]:
        """(image, its first image token's position, its token count) for each of a prompt's images, in order."""
        if not prompt.images:
            return []
        at = [i for i, token in enumerate(prompt.ids) if token == self.image_token_id]
        spans, done = [], 0
        for image in prompt.images:
            count = math.prod(image.grid_thw) // self._merge**2
            if at[done + count - 1] - at[done] != count - 1:  # the prompt builder writes an image's tokens together
                raise ValueError("an image's tokens are not contiguous in the prompt")
            spans.append((image, at[done], count))
            done += count
        return spans

    def _keys(self, prompt: Prompt, spans: list[tuple]) -> list:
        """Token ids with each image token tagged by its image, so prompts share a prefix only through the
        same pixels (two different images of one size have identical ids)."""
        if not spans:
            return prompt.ids
        keys = list(prompt.ids)
        for image, first, count in spans:
            keys[first : first + count] = [(self.image_token_id, image.key)] * count
        return keys

    @property
    def _merge(self) -> int:
        return self.vision.config.vision_config.spatial_merge_size

    def _positions(self, prompt: Prompt) -> torch.Tensor:
        """The rotary positions of a whole prompt, [3, L]: 0..L-1 for text, Qwen's 2-D grid for images."""
        n = len(prompt.ids)
        if not prompt.images:
            return torch.arange(n).expand(3, n)
        return image_positions(self.vision, prompt.ids, prompt.images, self.image_token_id)[0].cpu()

    def _embeddings(self, inputs: Inputs, prompt: Prompt, start: int, end: int) -> torch.Tensor:
        """Tokens `start:end` of a prompt embedded, its image tokens replaced by their images' features (only the
        images with tokens in that range: the others may not have been run)."""
        ids = torch.tensor(prompt.ids[start:end], device=self.device)
        embeds = self.embed(ids)
        rows = [
            inputs.features[image.key][max(0, start - first) : end - first]
            for image, first, count in inputs.spans[id(prompt)]
            if first < end and first + count > start
        ]
        if rows:
            mask = torch.tensor(prompt.ids[start:end], device=self.device) == self.image_token_id
            embeds = embeds.masked_scatter(mask[:, None], torch.cat(rows).to(embeds.dtype))
        return embeds
