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
   which rows share a pass (prefixes and suffixes alike) is chosen by a cost model (`passes.length_buckets`): one
   more pass against the padding it saves;
4. readout: hidden states only where an answer is read, times only the label rows of the LM head.

The same steps serve a standard-RoPE decoder (Qwen3, Llama): its cache holds attention KV only, and its positions
are the sequence positions alone (`decoder_of` refuses, at start, a model laid out otherwise).

With a prefix-state cache (`prefix_cache.py`), a group's prefix stops at its prompts' `state_end` (the save point),
a group whose prefix (or a saved start of it) was prefilled before resumes from a copy of that state and runs only
the rest, alone (no left padding after a prefix state), and every prefix prefilled is saved. A state that starts with
a system prompt (`Prompt.system_end`) is saved there too: a new state after a system prompt seen before resumes
from the end of the system prompt.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from blink.executor.compute_thread import on_cpu_thread, thread_for
from blink.executor.decoder import decoder_of, has_linear_attention
from blink.executor.inputs import Inputs, PromptInputs
from blink.executor.passes import delta_rule_chunk, fla_version, length_buckets
from blink.executor.prefix_cache import Entry, PrefixCache, layer_tensors, row_of, shared_structure
from blink.executor.vision import image_inputs
from blink.plan import Prompt, common_prefix_length


@dataclass
class Prefix:
    """One prefix pass: its groups as rows, left-padded to `width`, and the cache its suffixes continue from."""

    row_of: dict  # group index -> its row in this pass
    width: int
    mask: torch.Tensor  # [rows, width]
    hidden: torch.Tensor | None  # [rows, width, H]; None for a resumed prefix (no read lies in a saved prefix)
    cache: object


class Executor(PromptInputs):
    """Scores groups of prompts on one model. Not thread-safe: one thread owns it (see batching); on the CPU every
    pass runs on the compute thread whoever calls (compute_thread.py)."""

    # the fixed cost of one more forward pass, in tokens (see passes.length_buckets). CPU (1 thread): measured, the
    # optimum is flat from 8 to 32 on the 141M benchmark model and 32-128 on the 16M demo. CUDA: an estimate
    # (a pass reads every weight and launches every kernel), not yet measured: bench/gpu/gpu.sh sweeps it
    PASS_COST_TOKENS = {"cpu": 32.0, "cuda": 256.0}
    # the attention cache one pass may hold: a fan-out copies the prefix's KV into every suffix row (64
    # questions about a 30,000-token text on a 4B model would be 64 GB at once), and a prefix pass holds
    # every row it runs. Passes are cut to fit (see length_buckets)
    PASS_CACHE_BYTES = {"cpu": 2 << 30, "cuda": 4 << 30}

    # prefilled states kept across calls (see prefix_cache.py): 0 turns the cache off
    PREFIX_CACHE_BYTES = {"cpu": 512 << 20, "cuda": 4 << 30}

    def __init__(
        self,
        model,
        max_rows: int = 64,
        pass_cost_tokens: float | None = None,
        pass_cache_bytes: int | None = None,
        prefix_cache_bytes: int | None = None,
        prefix_block_tokens: int | None = None,
    ):
        self.model = model
        self.max_rows = max_rows  # rows per forward pass
        self.base, self.vision = decoder_of(model)
        # Qwen3.5's rotary embedding is multimodal: it takes 3 rows of positions (time, height, width) after the
        # sequence index; a standard-RoPE decoder (Qwen3, Llama, ...) takes the sequence positions alone
        self.multimodal_rope = "mrope_section" in (self.base.config.rope_parameters or {})
        self.head = model.get_output_embeddings().weight  # [vocab, hidden]
        self.embed = self.base.get_input_embeddings()
        self.image_token_id = getattr(model.config, "image_token_id", None)
        if pass_cost_tokens is None:
            pass_cost_tokens = self.PASS_COST_TOKENS.get(self.device.type, self.PASS_COST_TOKENS["cuda"])
        self.pass_cost_tokens = float(pass_cost_tokens)
        if pass_cache_bytes is None:
            pass_cache_bytes = self.PASS_CACHE_BYTES.get(self.device.type, self.PASS_CACHE_BYTES["cuda"])
        self.pass_cache_bytes = int(pass_cache_bytes)
        self.max_cells = max(1, self.pass_cache_bytes // self.kv_bytes_per_token())  # rows x tokens of cache
        if prefix_cache_bytes is None:
            prefix_cache_bytes = self.PREFIX_CACHE_BYTES.get(self.device.type, self.PREFIX_CACHE_BYTES["cuda"])
        self.prefix_cache = PrefixCache(prefix_cache_bytes, prefix_block_tokens)
        # passes choose the Gated DeltaNet rule's chunk (passes.delta_rule_chunk) where its PyTorch reference runs on
        # the CPU, where it was measured; flash-linear-attention's kernels, and the reference on a GPU, keep their own
        self.reference_delta_rule = (
            self.device.type == "cpu" and has_linear_attention(self.base.config) and fla_version() is None
        )

    @property
    def device(self):
        return self.head.device

    @property
    def passes_thread(self):
        """The one thread every pass of this executor runs on (the CPU's compute thread), or None."""
        return thread_for(self.device)

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

    def _forward(self, embeds, mask, text_positions, rope_positions, cache):
        # the Gated DeltaNet reference rule's chunk, where it runs (passes.delta_rule_chunk): a forward keyword
        # every layer passes on, which the linear-attention layers hand to the rule
        extra = {"chunk_size": delta_rule_chunk(embeds.shape[1])} if self.reference_delta_rule else {}
        if self.multimodal_rope:  # 4 rows: the sequence index (masks, cache slots) then the three rotary rows
            position_ids = torch.cat([text_positions[None], rope_positions]).to(self.device)
        else:
            position_ids = text_positions.to(self.device)
        out = self.base(
            inputs_embeds=embeds,
            attention_mask=mask.to(self.device),
            position_ids=position_ids,
            use_cache=True,
            cache=cache,
            **extra,
        )
        return out.last_hidden_state

    # the story: prefill -> fan-out -> suffixes -> readout ----------------------------------------------------
    def score(self, groups: list[list[Prompt]]) -> list[list[list[list[float]]]]:
        """Label logits (after temperature) per group, per prompt, per read: plain Python floats."""
        return self.score_reusing(groups)[0]

    def score_reusing(self, groups: list[list[Prompt]], saves: bool = True) -> tuple[list, list[int]]:
        """`score`, and per group the prefix tokens taken from the prefix-state cache (not run again). `saves=False`:
        states already saved are read, and a new one is saved only where bulk rows brought it before (bulk rows must
        not push interactive callers' out; a state or system prompt they repeat is run once)."""
        return on_cpu_thread(self.device, self._score_reusing, groups, saves)

    @torch.inference_mode()
    def _score_reusing(self, groups: list[list[Prompt]], saves: bool = True) -> tuple[list, list[int]]:
        inputs = self.inputs(groups)
        inputs.saves = saves
        if not saves and inputs.keys:
            inputs.repeats = frozenset(g for g, keys in inputs.keys.items() if self.prefix_cache.repeats(keys))
        resumed = self.saved_prefixes(inputs)
        inputs.features = self._encode_images(inputs, resumed)
        cached = [resumed[g].length if g in resumed else 0 for g in range(len(groups))]
        return self.readout(groups, self.read_hidden(inputs, resumed)), cached

    def read_hidden(self, inputs: Inputs, resumed: dict) -> dict:
        """Steps 1-3 for every group: (group, prompt, read) -> the hidden state at that read's position."""
        hidden = {}
        for prefix in self.prefixes(inputs, resumed):
            suffixes = self.suffixes(inputs, prefix)
            hidden |= self.read_states(inputs, prefix, suffixes)
            del prefix, suffixes  # this pass's cache and hidden states go before the next prefill
        return hidden

    def suffixes(self, inputs: Inputs, prefix: Prefix) -> dict:
        """Steps 2-3 after one prefix pass: (group, prompt) -> the hidden states of its suffix [span, H]."""
        passes = self.suffix_passes(inputs, prefix)
        suffixes = {}
        for i, rows in enumerate(passes):
            cache = self.fan_out(prefix, rows, copy_cache=i < len(passes) - 1)
            suffixes |= self.suffix_pass(inputs, prefix, rows, cache)
            del cache  # a fanned-out copy goes before the next pass makes its own
        return suffixes

    def inputs(self, groups: list[list[Prompt]]) -> Inputs:
        everything = [p for prompts in groups for p in prompts]
        spans = {id(p): self._image_spans(p) for p in everything}
        keys = [[self._keys(p, spans[id(p)]) for p in prompts] for prompts in groups]
        prefix_len = [
            len(prompts[0].ids) if len(prompts) == 1 else common_prefix_length(rows)
            for prompts, rows in zip(groups, keys)
        ]
        saved, systems = {}, {}
        if self.prefix_cache.active:
            for g, prompts in enumerate(groups):
                if end := self.save_point(prompts, prefix_len[g]):
                    prefix_len[g], saved[g] = end, keys[g][0][:end]
                    system = prompts[0].system_end
                    if 0 < system < end and all(p.system_end == system for p in prompts):
                        systems[g] = system
        positions = {id(p): self._positions(p) for p in everything}
        return Inputs(groups, prefix_len, {}, positions, spans, saved, systems)

    @staticmethod
    def save_point(prompts: list[Prompt], prefix_len: int) -> int:
        """Where a group's prefix is saved (0: not saved): its prompts' common `state_end`, when every read lies
        past it (the saved prefix then needs no hidden states of its own)."""
        end = prompts[0].state_end
        if not 0 < end <= prefix_len or any(p.state_end != end for p in prompts):
            return 0
        return end if all(read.position >= end for p in prompts for read in p.reads) else 0

    def saved_prefixes(self, inputs: Inputs) -> dict:
        """Group -> the longest saved entry its prefix starts with."""
        found = {}
        for g, keys in inputs.keys.items():
            if (entry := self.prefix_cache.lookup(keys, len(keys))) is not None:
                found[g] = entry
        return found

    def prefixes(self, inputs: Inputs, resumed: dict):
        """Every group's prefix state, one `Prefix` at a time: the resumed ones (stacked into passes as prefilled
        prefixes are, so a batch of requests about saved states still runs its suffixes together), then the
        prefilled passes (each saved when its group has a save point)."""
        fresh = [g for g in range(len(inputs.groups)) if g not in resumed]
        resumed = resumed | self.saved_systems(inputs, [g for g in fresh if g in inputs.systems])
        fresh = [g for g in fresh if g not in resumed]
        for bucket in self.prefix_passes(inputs, list(resumed)):
            yield self.stacked(inputs, bucket, [self.resume(inputs, g, resumed[g]) for g in bucket])
        for bucket in self.prefix_passes(inputs, fresh):
            prefix = self.prefill(inputs, bucket)
            for g in bucket:
                if g in inputs.keys and inputs.saving(g):
                    start = prefix.width - inputs.prefix_len[g]
                    self.prefix_cache.save(inputs.keys[g], row_of(prefix.cache, prefix.row_of[g], start))
            yield prefix

    def saved_systems(self, inputs: Inputs, groups: list[int]) -> dict:
        """1''. The system prompts of groups that start with one and found nothing saved: prefilled (batched as
        prefixes are) and saved, so the next state after the same system prompt resumes there. Group -> the entry
        its own prefix resumes from (held here even where the budget keeps it out of the cache)."""
        lengths = {g: inputs.systems[g] for g in groups}
        found = {}
        for bucket in length_buckets(groups, lengths, self.max_rows, self.pass_cost_tokens, self.max_cells):
            prefix = self.prefill(inputs, bucket, lengths)
            for g in bucket:
                row = row_of(prefix.cache, prefix.row_of[g], prefix.width - lengths[g])
                if inputs.saves or self.prefix_cache.repeats(inputs.keys[g][: lengths[g]]):
                    self.prefix_cache.save(inputs.keys[g][: lengths[g]], row)
                found[g] = Entry(lengths[g], row, 0)
            del prefix
        return found

    def resume(self, inputs: Inputs, g: int, entry):
        """1'. A group's prefix cache from a saved state: only the tokens past it run (one row, no padding), on a
        copy, and the longer prefix is saved in turn. With nothing past it the saved tensors are shared, not
        copied: every later step makes new tensors before a forward writes (`fan_out` reorders, `stacked`
        concatenates), so only the cache's structure is copied."""
        done, n = entry.length, inputs.prefix_len[g]
        if n == done:
            return shared_structure(entry.cache)
        cache = copy.deepcopy(entry.cache)
        self.extend(inputs, g, cache, done, n)
        if inputs.saving(g):
            self.prefix_cache.save(inputs.keys[g], copy.deepcopy(cache))
        return cache

    def extend(self, inputs: Inputs, g: int, cache, done: int, end: int) -> torch.Tensor:
        """Tokens `done:end` of group `g`'s first prompt run on `cache` (one row after its first `done` tokens, no
        padding), which then holds `end`: their hidden states [end - done, H]."""
        first = inputs.groups[g][0]
        embeds = self._embeddings(inputs, first, done, end)[None]
        text = torch.arange(done, end)[None]
        rope = inputs.positions[id(first)][:, done:end][:, None]
        return self._forward(embeds, torch.ones((1, end), dtype=torch.long), text, rope, cache)[0]

    def stacked(self, inputs: Inputs, bucket: list[int], caches: list) -> Prefix:
        """Resumed batch-of-one caches as one `Prefix`, a row per group: attention KV left-padded with zeros to
        the longest (masked, as a left-padded prefill's pads are), the DeltaNet states stacked (each row's own:
        they hold no positions)."""
        width = max(inputs.prefix_len[g] for g in bucket)
        mask = torch.zeros((len(bucket), width), dtype=torch.long)
        for row, g in enumerate(bucket):
            mask[row, width - inputs.prefix_len[g] :] = 1
        if len(caches) == 1:
            return Prefix({bucket[0]: 0}, width, mask, None, caches[0])
        rows = [list(layer_tensors(cache)) for cache in caches]
        memo = {}
        for i, (_, name, tensor) in enumerate(rows[0]):
            parts = [row[i][2] for row in rows]
            if name in ("keys", "values"):  # [1, heads, length, dim]
                parts = [torch.nn.functional.pad(t, (0, 0, width - t.shape[-2], 0)) for t in parts]
            memo[id(tensor)] = torch.cat(parts)
        cache = copy.deepcopy(caches[0], memo)
        return Prefix({g: row for row, g in enumerate(bucket)}, width, mask, None, cache)

    def prefix_passes(self, inputs: Inputs, groups: list[int]) -> list[list[int]]:
        """The groups whose prefixes run together. Groups of very different prefix lengths (a batch of requests
        about texts of 100 and 2,000 tokens) run in separate passes: left-padding them all to the longest would
        multiply the work."""
        lengths = {g: inputs.prefix_len[g] for g in groups}
        return length_buckets(groups, lengths, self.max_rows, self.pass_cost_tokens, self.max_cells)

    def prefill(self, inputs: Inputs, bucket: list[int], lengths: dict | None = None) -> Prefix:
        """1. The prefixes of the groups in `bucket` (their first `lengths` tokens: default, their whole prefix),
        left-padded to the longest, in one pass from an empty cache."""
        lengths = lengths or inputs.prefix_len
        width = max(lengths[g] for g in bucket)
        embeds = torch.zeros(
            (len(bucket), width, self.embed.weight.shape[1]), dtype=self.embed.weight.dtype, device=self.device
        )
        mask = torch.zeros((len(bucket), width), dtype=torch.long)
        rope = torch.zeros((3, len(bucket), width), dtype=torch.long)
        for row, g in enumerate(bucket):
            n, first = lengths[g], inputs.groups[g][0]
            embeds[row, width - n :] = self._embeddings(inputs, first, 0, n)
            mask[row, width - n :] = 1
            rope[:, row, width - n :] = inputs.positions[id(first)][:, :n]
        text = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = self.new_cache()
        hidden = self._forward(embeds, mask, text, rope, cache)
        return Prefix({g: row for row, g in enumerate(bucket)}, width, mask, hidden, cache)

    def suffix_passes(self, inputs: Inputs, prefix: Prefix) -> list[list[tuple[int, int]]]:
        """The (group, prompt) rows with tokens past their group's prefix, grouped into suffix passes."""
        rows = [
            (g, p)
            for g in prefix.row_of
            for p, prompt in enumerate(inputs.groups[g])
            if len(prompt.ids) > inputs.prefix_len[g]
        ]
        tails = {(g, p): len(inputs.groups[g][p].ids) - inputs.prefix_len[g] for g, p in rows}
        return length_buckets(rows, tails, self.max_rows, self.pass_cost_tokens, self.max_cells, carried=prefix.width)

    def fan_out(self, prefix: Prefix, rows: list[tuple[int, int]], copy_cache: bool):
        """2. The prefix cache with one row per suffix row. `reorder_cache` replaces every tensor of the cache it
        is called on (an `index_select`: new tensors), so a pass that is not the last reorders a copy of the
        structure only, sharing the prefix's tensors."""
        cache = shared_structure(prefix.cache) if copy_cache else prefix.cache
        cache.reorder_cache(torch.tensor([prefix.row_of[g] for g, _ in rows], device=self.device))
        return cache

    def suffix_pass(self, inputs: Inputs, prefix: Prefix, rows: list[tuple[int, int]], cache) -> dict:
        """3. The rows' suffixes, right-padded, positions continuing their group's prefix, attending to it (left-
        padded) through the fanned-out cache. Returns (group, prompt) -> hidden states of its suffix [span, H]."""
        tails = [len(inputs.groups[g][p].ids) - inputs.prefix_len[g] for g, p in rows]
        span = max(tails)
        embeds = torch.zeros(
            (len(rows), span, self.embed.weight.shape[1]), dtype=self.embed.weight.dtype, device=self.device
        )
        mask = torch.zeros((len(rows), span), dtype=torch.long)
        text = torch.zeros((len(rows), span), dtype=torch.long)
        rope = torch.zeros((3, len(rows), span), dtype=torch.long)
        for r, ((g, p), tail) in enumerate(zip(rows, tails)):
            prompt, n = inputs.groups[g][p], inputs.prefix_len[g]
            embeds[r, :tail] = self._embeddings(inputs, prompt, n, len(prompt.ids))
            mask[r, :tail] = 1
            text[r] = torch.arange(n, n + span)
            rope[:, r, :tail] = inputs.positions[id(prompt)][:, n:]
        full_mask = torch.cat([prefix.mask[[prefix.row_of[g] for g, _ in rows]], mask], dim=1)
        hidden = self._forward(embeds, full_mask, text, rope, cache)  # [rows, span, H]
        return {gp: hidden[r] for r, gp in enumerate(rows)}

    def read_states(self, inputs: Inputs, prefix: Prefix, suffixes: dict) -> dict:
        """The hidden state at every read of the prefix pass's groups, from the prefix or the prompt's suffix:
        (group, prompt, read) -> vector, copied out so the pass's hidden states (rows x width x H) can go."""
        keys, vectors = [], []
        for g, row in prefix.row_of.items():
            n = inputs.prefix_len[g]
            for p, prompt in enumerate(inputs.groups[g]):
                for k, read in enumerate(prompt.reads):
                    if read.position < n:
                        vectors.append(prefix.hidden[row, prefix.width - n + read.position])
                    else:
                        vectors.append(suffixes[(g, p)][read.position - n])
                    keys.append((g, p, k))
        return dict(zip(keys, torch.stack(vectors))) if vectors else {}

    def readout(self, groups: list[list[Prompt]], hidden: dict) -> list[list[list[list[float]]]]:
        """4. The hidden state at every read position times only the label rows of the LM head, then temperature:
        per group, per prompt, per read, the label logits as plain floats."""
        keys = [
            (g, p, k)
            for g, prompts in enumerate(groups)
            for p, prompt in enumerate(prompts)
            for k in range(len(prompt.reads))
        ]
        label_ids = sorted(
            {i for prompts in groups for prompt in prompts for read in prompt.reads for i in read.label_ids}
        )
        column = {token: c for c, token in enumerate(label_ids)}
        states = torch.stack([hidden[key] for key in keys]).float()
        logits = (states @ self.head[torch.tensor(label_ids, device=self.device)].float().T).cpu()  # [reads, labels]
        rows = iter(logits)
        return [
            [
                [(next(rows)[[column[t] for t in read.label_ids]] / read.temperature).tolist() for read in prompt.reads]
                for prompt in prompts
            ]
            for prompts in groups
        ]

    def reference(self, prompt: Prompt) -> list[list[float]]:
        """The plain path: one fresh forward of one prompt, no cache reuse, logits only at its read positions
        (DecisionPipeline's model cost). The exactness checks and the benchmarks' plain side."""
        return on_cpu_thread(self.device, self._reference, prompt)

    @torch.inference_mode()
    def _reference(self, prompt: Prompt) -> list[list[float]]:
        ids = torch.tensor([prompt.ids], device=self.device)
        extra = image_inputs(prompt.images, ids, self.image_token_id, self.device) if prompt.images else {}
        keep = torch.tensor([read.position for read in prompt.reads], device=self.device)
        logits = self.model(input_ids=ids, use_cache=False, logits_to_keep=keep, **extra).logits[0].float()
        return [(logits[i, read.label_ids] / read.temperature).cpu().tolist() for i, read in enumerate(prompt.reads)]
