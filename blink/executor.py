"""The forward-pass executor: shared-prefix prefill, cache fan-out, right-padded suffixes, label-row readout.

Input is plain data (token ids and read positions), output is plain floats, so the same function runs in
the main process, in a ZeroGPU worker (arguments and results are pickled) and in tests.

Why this is written by hand: `transformers`' DecisionPipeline runs one full prompt per question with no
cache, so a request with Q questions about one state pays for the state Q times. Here a *group* is the set
of prompts of one request. Per group the longest common token prefix is computed once:

1. prefill: every group's prefix in one batch, left-padded (exact from an empty state: padded inputs are
   zeroed before the linear-attention layers and masked in the attention layers);
2. fan-out: the hybrid cache (attention KV + DeltaNet conv and recurrent states) is copied to one row per
   prompt with `reorder_cache` (`crop`/`batch_repeat_interleave` don't work on linear-attention layers);
3. suffixes: every prompt's remaining tokens in one batch, *right*-padded (left padding after a prefix
   state is wrong: pads would decay the recurrent state), positions continuing each group's prefix;
4. readout: hidden states only where an answer is read, times only the label rows of the LM head.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch


@dataclass
class Read:
    """Where one question's answer is read in its prompt: the position, the label token ids, the temperature."""

    position: int
    label_ids: list[int]
    temperature: float = 1.0


@dataclass
class Prompt:
    ids: list[int]
    reads: list[Read]


def common_prefix_length(rows: list[list[int]]) -> int:
    first, n = rows[0], min(len(r) for r in rows)
    for i in range(n):
        token = first[i]
        if any(r[i] != token for r in rows):
            return i
    return n


class Executor:
    """Scores groups of prompts on one model. Not thread-safe: one thread owns it (see batching)."""

    def __init__(self, model, pad_token_id: int):
        self.model = model
        self.base = model.get_decoder() if hasattr(model, "get_decoder") else model.model
        self.head = model.get_output_embeddings().weight  # [vocab, hidden]
        self.pad = int(pad_token_id)
        # transformers >= 5.24 names the cache argument `cache`; older 5.x `past_key_values`
        params = inspect.signature(self.base.forward).parameters
        self.cache_arg = "cache" if "cache" in params else "past_key_values"

    @property
    def device(self):
        return self.head.device

    def new_cache(self):
        from transformers import DynamicCache

        return DynamicCache(config=self.model.config)

    @torch.inference_mode()
    def score(self, groups: list[list[Prompt]]) -> list[list[list[list[float]]]]:
        """Label logits (after temperature) per group, per prompt, per read: plain Python floats."""
        dev = self.device
        # 1. prefixes: the common prefix of a group's prompts; a lone prompt is all prefix
        prefix_len = []
        for prompts in groups:
            rows = [p.ids for p in prompts]
            n = len(rows[0]) if len(rows) == 1 else common_prefix_length(rows)
            prefix_len.append(n)
        width = max(prefix_len)
        ids = torch.full((len(groups), width), self.pad, dtype=torch.long)
        mask = torch.zeros((len(groups), width), dtype=torch.long)
        for g, prompts in enumerate(groups):
            n = prefix_len[g]
            ids[g, width - n:] = torch.tensor(prompts[0].ids[:n])
            mask[g, width - n:] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = self.new_cache()
        out = self.base(input_ids=ids.to(dev), attention_mask=mask.to(dev), position_ids=positions.to(dev),
                        use_cache=True, **{self.cache_arg: cache})
        prefix_hidden = out.last_hidden_state  # [G, width, H]

        # 2. fan out one cache row per prompt that has tokens past its group's prefix
        rows = [(g, p) for g, prompts in enumerate(groups) for p, prompt in enumerate(prompts)
                if len(prompt.ids) > prefix_len[g]]
        suffix_hidden = None
        if rows:
            cache.reorder_cache(torch.tensor([g for g, _ in rows], device=dev))
            span = max(len(groups[g][p].ids) - prefix_len[g] for g, p in rows)
            s_ids = torch.full((len(rows), span), self.pad, dtype=torch.long)
            s_mask = torch.zeros((len(rows), span), dtype=torch.long)
            s_pos = torch.zeros((len(rows), span), dtype=torch.long)
            for r, (g, p) in enumerate(rows):
                tail = groups[g][p].ids[prefix_len[g]:]
                s_ids[r, :len(tail)] = torch.tensor(tail)
                s_mask[r, :len(tail)] = 1
                s_pos[r] = torch.arange(prefix_len[g], prefix_len[g] + span)
            # 3. right-padded suffixes, attending to their own group's (left-padded) prefix
            full_mask = torch.cat([mask[[g for g, _ in rows]], s_mask], dim=1)
            out = self.base(input_ids=s_ids.to(dev), attention_mask=full_mask.to(dev), position_ids=s_pos.to(dev),
                            use_cache=True, **{self.cache_arg: cache})
            suffix_hidden = out.last_hidden_state  # [R, span, H]
        row_of = {gp: r for r, gp in enumerate(rows)}

        # 4. gather the hidden state at every read position, then only the label rows of the LM head
        vectors, where = [], []
        for g, prompts in enumerate(groups):
            for p, prompt in enumerate(prompts):
                for read in prompt.reads:
                    if read.position < prefix_len[g]:
                        vectors.append(prefix_hidden[g, width - prefix_len[g] + read.position])
                    else:
                        vectors.append(suffix_hidden[row_of[(g, p)], read.position - prefix_len[g]])
                    where.append(read)
        hidden = torch.stack(vectors).float()
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

    @torch.inference_mode()
    def reference(self, prompt: Prompt) -> list[list[float]]:
        """The plain path: one fresh full forward of one prompt, full LM head, no cache reuse (for checks)."""
        ids = torch.tensor([prompt.ids], device=self.device)
        logits = self.model(input_ids=ids, use_cache=False).logits[0].float()
        return [(logits[r.position, r.label_ids] / r.temperature).cpu().tolist() for r in prompt.reads]
