"""The forward-pass executor: shared-prefix prefill, cache fan-out, right-padded suffixes, label-row readout.

Input is plain data (token ids and read positions), output is plain floats, so the same function runs in
the main process, in a ZeroGPU worker (arguments and results are pickled) and in tests.

Why this is written by hand: `transformers`' DecisionPipeline runs one full prompt per question with no
cache, so a request with Q questions about one state pays for the state Q times. Here a *group* is the set
of prompts of one request. Per group the longest common token prefix is computed once:

1. prefill: the groups' prefixes, left-padded, in passes of similar lengths (exact from an empty state:
   padded inputs are zeroed before the linear-attention layers and masked in the attention layers);
2. fan-out: the hybrid cache (attention KV + DeltaNet conv and recurrent states) is copied to one row per
   prompt with `reorder_cache` (`crop`/`batch_repeat_interleave` don't work on linear-attention layers);
3. suffixes: every prompt's remaining tokens, *right*-padded (left padding after a prefix state is wrong:
   pads would decay the recurrent state), positions continuing each group's prefix;
   which rows share a pass (prefixes and suffixes alike) is chosen by a cost model (`length_buckets`): one
   more pass against the padding it saves;
4. readout: hidden states only where an answer is read, times only the label rows of the LM head.
"""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass, field

import torch


@dataclass
class Read:
    """Where one question's answer is read in its prompt: the position, the label token ids, the temperature."""

    position: int
    label_ids: list[int]
    temperature: float = 1.0


@dataclass(eq=False)
class Image:
    """One image of a request, preprocessed (CPU tensors): shared by every prompt that shows it, so it is
    pickled once and encoded once per call."""

    key: str                  # content hash: prompts showing the same image share the prefix through it
    pixel_values: object      # torch.Tensor [patches, dim], CPU
    grid_thw: list[int]


@dataclass
class Prompt:
    ids: list[int]
    reads: list[Read]
    images: list[Image] = field(default_factory=list)  # in order of appearance in `ids`


def pixels_and_grid(images: list[Image], device) -> tuple[torch.Tensor, torch.Tensor]:
    """The images' patches, concatenated, and their (t, h, w) grids: what the vision tower takes."""
    pixels = torch.cat([torch.as_tensor(i.pixel_values) for i in images]).to(device)
    return pixels, torch.tensor([i.grid_thw for i in images], device=device)


def image_inputs(images: list[Image], input_ids: torch.Tensor, image_token_id: int, device) -> dict:
    """A whole-prompt forward's image arguments (the plain path, chat's first step)."""
    pixels, grid = pixels_and_grid(images, device)
    return {"pixel_values": pixels, "image_grid_thw": grid,
            "mm_token_type_ids": (input_ids == image_token_id).int().to(device)}


def image_positions(inner, ids: list[int], images: list[Image], image_token_id: int) -> tuple[torch.Tensor, int]:
    """Qwen's 3-D rotary positions [3, n] of a prompt showing `images` (CPU), and the offset the text after
    it continues from. `inner`: the vision-language model that owns `get_rope_index`."""
    input_ids = torch.tensor([ids])
    types = (input_ids == image_token_id).int()
    grid = torch.tensor([i.grid_thw for i in images])
    positions, deltas = inner.get_rope_index(input_ids, types, image_grid_thw=grid)
    return positions[:, 0], int(deltas.view(-1)[0])


def length_buckets(rows: list, lengths: dict, max_rows: int, pass_cost: float = 0.0, max_cells: int | None = None,
                   carried: int = 0) -> list[list]:
    """Rows (prefixes, or suffixes) grouped into forward passes at the least estimated cost: a pass costs
    `pass_cost` (its fixed cost, in tokens) plus rows x its longest row (padding is paid for). With a small pass cost
    (a CPU) nearly every distinct length gets its own pass; with a large one (a GPU's kernel launches and
    weight reads per pass) lengths share passes and padding.

    Memory: a pass of r rows padded to L holds r x (carried + L) cache cells (`carried`: the prefix every
    suffix row carries in its cache); a pass takes at most `max_rows` rows and at most `max_cells` cells.

    Exact on the runs of equal lengths (sorted longest first): a pass never splits a run except where it is
    full; a group of runs with more rows than a pass holds is cut into full passes, costed (and sized) as if
    each were as long as the group's longest row."""

    def per_pass(length: int) -> int:
        fits = max_rows if max_cells is None else max_cells // (carried + length)
        return max(1, min(max_rows, fits))

    ordered = sorted(rows, key=lambda r: -lengths[r])
    runs: list[list] = []  # rows of equal length, longest first
    for row in ordered:
        if runs and lengths[runs[-1][0]] == lengths[row]:
            runs[-1].append(row)
        else:
            runs.append([row])
    # best[i]: the cheapest cost of the first i runs; cut[i]: where its last group starts
    best, cut = [0.0] + [float("inf")] * len(runs), [0] * (len(runs) + 1)
    for i in range(1, len(runs) + 1):
        count = 0
        for j in range(i - 1, -1, -1):  # the last group is runs[j:i], padded to runs[j]'s length
            count += len(runs[j])
            head = lengths[runs[j][0]]
            cost = best[j] + -(-count // per_pass(head)) * pass_cost + count * head
            if cost < best[i]:
                best[i], cut[i] = cost, j
    groups, i = [], len(runs)
    while i:
        groups.append([row for run in runs[cut[i]:i] for row in run])
        i = cut[i]
    passes = []
    for group in reversed(groups):
        size = per_pass(lengths[group[0]])
        passes += [group[k:k + size] for k in range(0, len(group), size)]
    return passes


def common_prefix_length(rows: list[list]) -> int:
    """Length of the longest common prefix: a binary search on slice equality per row (list comparison
    runs in C, where a token-by-token Python loop over a 2,000-token state per question costs milliseconds)."""
    first, n = rows[0], min(len(r) for r in rows)
    for row in rows[1:]:
        if row[:n] == first[:n]:
            continue
        lo, hi = 0, n  # first[:lo] == row[:lo]; first[:hi] != row[:hi]
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if row[:mid] == first[:mid]:
                lo = mid
            else:
                hi = mid
        n = lo
    return n


class Executor:
    """Scores groups of prompts on one model. Not thread-safe: one thread owns it (see batching)."""

    # the fixed cost of one more forward pass, in tokens (see length_buckets). CPU (1 thread): measured, the
    # optimum is flat from 8 to 32 on the 141M benchmark model and 32-128 on the 16M demo. CUDA: an estimate
    # (a pass reads every weight and launches every kernel), not yet measured: bench/gpu.sh sweeps it
    PASS_COST_TOKENS = {"cpu": 32.0, "cuda": 256.0}
    # the attention cache one pass may hold: a fan-out copies the prefix's KV into every suffix row (64
    # questions about a 30,000-token text on a 4B model would be 64 GB at once), and a prefix pass holds
    # every row it runs. Passes are cut to fit (see length_buckets)
    PASS_CACHE_BYTES = {"cpu": 2 << 30, "cuda": 4 << 30}

    def __init__(self, model, pad_token_id: int, max_rows: int = 64, pass_cost_tokens: float | None = None,
                 pass_cache_bytes: int | None = None):
        self.model = model
        self.max_rows = max_rows  # rows per forward pass
        inner = model.model
        # a vision-language model keeps its language model inside; a text model is its own
        self.vision = inner if hasattr(inner, "language_model") else None
        self.base = inner.language_model if self.vision is not None else inner
        self.head = model.get_output_embeddings().weight  # [vocab, hidden]
        self.embed = self.base.get_input_embeddings()
        self.pad = int(pad_token_id)
        self.image_token_id = getattr(model.config, "image_token_id", None)
        # transformers >= 5.24 names the cache argument `cache`; older 5.x `past_key_values`
        params = inspect.signature(self.base.forward).parameters
        self.cache_arg = "cache" if "cache" in params else "past_key_values"
        if pass_cost_tokens is None:
            pass_cost_tokens = self.PASS_COST_TOKENS.get(self.device.type, self.PASS_COST_TOKENS["cuda"])
        self.pass_cost_tokens = float(pass_cost_tokens)
        if pass_cache_bytes is None:
            pass_cache_bytes = self.PASS_CACHE_BYTES.get(self.device.type, self.PASS_CACHE_BYTES["cuda"])
        self.pass_cache_bytes = int(pass_cache_bytes)
        self.max_cells = max(1, self.pass_cache_bytes // self.kv_bytes_per_token())  # rows x tokens of cache

    @property
    def device(self):
        return self.head.device

    def kv_bytes_per_token(self) -> int:
        """Attention-cache bytes one token of one row takes (keys and values of the full-attention layers)."""
        config = self.base.config
        layers = getattr(config, "layer_types", None) or ["full_attention"] * config.num_hidden_layers
        heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        attention = sum(kind != "linear_attention" for kind in layers)
        return max(1, attention * 2 * heads * head_dim * self.embed.weight.element_size())

    def new_cache(self):
        from transformers import DynamicCache

        return DynamicCache(config=self.base.config)

    # multimodal helpers: for text-only prompts these reduce to token embeddings and 0..n-1 positions --------
    def _encode_images(self, prompts: list[Prompt]) -> dict:
        """Vision features per distinct image of the call, the vision tower run once for all of them."""
        unique = {}
        for prompt in prompts:
            for image in prompt.images:
                unique.setdefault(image.key, image)
        if not unique:
            return {}
        if self.vision is None:
            raise ValueError("this model has no vision tower")
        images = list(unique.values())
        pixels, grid = pixels_and_grid(images, self.device)
        features = self.vision.get_image_features(pixels, grid, return_dict=True).pooler_output
        return {image.key: f for image, f in zip(images, features)}

    def _keys(self, prompt: Prompt) -> list:
        """Token ids with each image token tagged by its image, so prompts share a prefix only through the
        same pixels (two different images of one size have identical ids)."""
        if not prompt.images:
            return prompt.ids
        keys, images, left = list(prompt.ids), iter(prompt.images), 0
        for i, token in enumerate(keys):
            if token == self.image_token_id:
                if left == 0:
                    image = next(images)
                    left = int(torch.tensor(image.grid_thw).prod()) // self._merge ** 2
                keys[i] = (token, image.key)
                left -= 1
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

    def _embeddings(self, prompt: Prompt, start: int, end: int, features: dict) -> torch.Tensor:
        ids = torch.tensor(prompt.ids[start:end], device=self.device)
        embeds = self.embed(ids)
        if prompt.images:
            rows = torch.cat([features[i.key] for i in prompt.images]).to(embeds.dtype)
            is_image = torch.tensor(prompt.ids, device=self.device) == self.image_token_id
            skip = int(is_image[:start].sum())
            mask = is_image[start:end]
            embeds = embeds.masked_scatter(mask[:, None], rows[skip:skip + int(mask.sum())])
        return embeds

    def _forward(self, embeds, mask, text_positions, rope_positions, cache):
        # 4 rows: the sequence index (masks, cache slots) then the three rotary rows
        position_ids = torch.cat([text_positions[None], rope_positions]).to(self.device)
        out = self.base(inputs_embeds=embeds, attention_mask=mask.to(self.device), position_ids=position_ids,
                        use_cache=True, **{self.cache_arg: cache})
        return out.last_hidden_state

    @torch.inference_mode()
    def score(self, groups: list[list[Prompt]]) -> list[list[list[list[float]]]]:
        """Label logits (after temperature) per group, per prompt, per read: plain Python floats."""
        dev = self.device
        everything = [p for prompts in groups for p in prompts]
        features = self._encode_images(everything)
        positions = {id(p): self._positions(p) for p in everything}

        # 1. prefixes: the common prefix of a group's prompts; a lone prompt is all prefix. Groups of very
        # different prefix lengths (a batch of requests about texts of 100 and 2,000 tokens) run in separate
        # passes, chosen like the suffix passes: left-padding them all to the longest would multiply the work
        prefix_len = [len(prompts[0].ids) if len(prompts) == 1
                      else common_prefix_length([self._keys(p) for p in prompts]) for prompts in groups]
        at = {}  # (g, p, read index) -> hidden state at that read position
        for bucket in length_buckets(list(range(len(groups))), dict(enumerate(prefix_len)), self.max_rows,
                                     self.pass_cost_tokens, self.max_cells):
            self._prefix_pass(bucket, groups, prefix_len, features, positions, at)

        # 4. the hidden state at every read position, then only the label rows of the LM head
        where = [read for prompts in groups for prompt in prompts for read in prompt.reads]
        hidden = torch.stack([at[(g, p, k)] for g, prompts in enumerate(groups) for p, prompt in enumerate(prompts)
                              for k in range(len(prompt.reads))]).float()
        label_ids = sorted({i for read in where for i in read.label_ids})
        column = {token: c for c, token in enumerate(label_ids)}
        logits = hidden @ self.head[torch.tensor(label_ids, device=dev)].float().T  # [reads, labels]
        logits = logits.cpu()
        results, k = [], 0
        for prompts in groups:
            per_group = []
            for prompt in prompts:
                per_prompt = []
                for read in prompt.reads:
                    row = logits[k, [column[t] for t in read.label_ids]] / read.temperature
                    per_prompt.append(row.tolist())
                    k += 1
                per_group.append(per_prompt)
            results.append(per_group)
        return results

    def _prefix_pass(self, bucket: list[int], groups, prefix_len, features, positions, at: dict) -> None:
        """One prefix pass over the groups in `bucket` (left-padded to their longest prefix), then their suffix
        passes from its cache; stores the hidden state of every read of these groups in `at`."""
        dev, hidden_size = self.device, self.embed.weight.shape[1]
        width = max(prefix_len[g] for g in bucket)
        embeds = torch.zeros((len(bucket), width, hidden_size), dtype=self.embed.weight.dtype, device=dev)
        mask = torch.zeros((len(bucket), width), dtype=torch.long)
        rope = torch.zeros((3, len(bucket), width), dtype=torch.long)
        for row, g in enumerate(bucket):
            n, first = prefix_len[g], groups[g][0]
            embeds[row, width - n:] = self._embeddings(first, 0, n, features)
            mask[row, width - n:] = 1
            rope[:, row, width - n:] = positions[id(first)][:, :n]
        text = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = self.new_cache()
        prefix_hidden = self._forward(embeds, mask, text, rope, cache)  # [rows, width, H]

        # 2. fan out one cache row per prompt that has tokens past its group's prefix, in length buckets
        row_of = {g: row for row, g in enumerate(bucket)}
        rows = [(g, p) for g in bucket for p, prompt in enumerate(groups[g]) if len(prompt.ids) > prefix_len[g]]
        tails = {gp: len(groups[gp[0]][gp[1]].ids) - prefix_len[gp[0]] for gp in rows}
        suffixes = length_buckets(rows, tails, self.max_rows, self.pass_cost_tokens, self.max_cells, carried=width)
        suffix_of = {}  # (g, p) -> (hidden states of its suffix pass, its row there)
        for b, suffix_rows in enumerate(suffixes):
            # every pass but the last fans out a copy: reorder_cache works in place
            pass_cache = cache if b == len(suffixes) - 1 else copy.deepcopy(cache)
            pass_cache.reorder_cache(torch.tensor([row_of[g] for g, _ in suffix_rows], device=dev))
            span = max(tails[gp] for gp in suffix_rows)
            s_embeds = torch.zeros((len(suffix_rows), span, hidden_size), dtype=embeds.dtype, device=dev)
            s_mask = torch.zeros((len(suffix_rows), span), dtype=torch.long)
            s_text = torch.zeros((len(suffix_rows), span), dtype=torch.long)
            s_rope = torch.zeros((3, len(suffix_rows), span), dtype=torch.long)
            for r, (g, p) in enumerate(suffix_rows):
                prompt, n = groups[g][p], prefix_len[g]
                tail = tails[(g, p)]
                s_embeds[r, :tail] = self._embeddings(prompt, n, len(prompt.ids), features)
                s_mask[r, :tail] = 1
                s_text[r] = torch.arange(n, n + span)
                s_rope[:, r, :tail] = positions[id(prompt)][:, n:]
            # 3. right-padded suffixes, attending to their own group's (left-padded) prefix
            full_mask = torch.cat([mask[[row_of[g] for g, _ in suffix_rows]], s_mask], dim=1)
            hidden = self._forward(s_embeds, full_mask, s_text, s_rope, pass_cache)  # [rows, span, H]
            for r, gp in enumerate(suffix_rows):
                suffix_of[gp] = (hidden, r)

        keys, vectors = [], []
        for g in bucket:
            n = prefix_len[g]
            for p, prompt in enumerate(groups[g]):
                for k, read in enumerate(prompt.reads):
                    if read.position < n:
                        vectors.append(prefix_hidden[row_of[g], width - n + read.position])
                    else:
                        hidden, r = suffix_of[(g, p)]
                        vectors.append(hidden[r, read.position - n])
                    keys.append((g, p, k))
        # copied out, so this pass's hidden states (rows x width x hidden) are freed before the next pass
        for key, vector in zip(keys, torch.stack(vectors) if vectors else []):
            at[key] = vector

    @torch.inference_mode()
    def reference(self, prompt: Prompt) -> list[list[float]]:
        """The plain path: one fresh full forward of one prompt, full LM head, no cache reuse (for checks)."""
        ids = torch.tensor([prompt.ids], device=self.device)
        extra = image_inputs(prompt.images, ids, self.image_token_id, self.device) if prompt.images else {}
        logits = self.model(input_ids=ids, use_cache=False, **extra).logits[0].float()
        return [(logits[r.position, r.label_ids] / r.temperature).cpu().tolist() for r in prompt.reads]
