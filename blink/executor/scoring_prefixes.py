"""Scoring prompts' prefixes reused across requests (echo, prompt_logprobs): where they are saved, how they resume.

lm-eval's `local-completions` sends a multiple-choice item's choices as lone prompts, one a request (context and one
answer as one token list): no prompt says where its context ends, and a Gated DeltaNet state exists only at the
position it was saved at (`prefix_cache.py`). So, as vLLM's automatic prefix caching does for hybrid models, a scoring
prompt's state is saved at chosen points while its prefix runs (its forward cut there, each cut exact):
- a lone prompt: its last `SAVED_BLOCKS` block-aligned boundaries (multiples of `PrefixCache.block`, the
  `prefix_block_tokens` knob), so the next choice of the item, whose answer starts past them, resumes there;
- a group (prompts of one request sharing a start): the end of that start, a context known to be shared;
- either: where the prompt stops matching a recent scoring prompt (`PrefixCache.recent`, tokens only), when that is
  a block or more: the end of the context the item's earlier choices share, so its third and later choices run only
  their answer, and a few-shot preamble shared by items is run once.
Not every block of every prompt: each entry holds the recurrent states of every linear-attention layer, a fixed size
(tens of MB on a 4B model) whatever its length.

A scoring entry also holds what its prefix's positions scored (each next token's logprob, rank and the k most
likely, tensors counted in its bytes) and the hidden state at its last position (the token after the prefix differs
from prompt to prompt), so a prompt resuming there runs neither the model nor the LM head over the prefix. A prompt
resumes only from a scoring entry that holds as many alternatives as it asks (and ranks, where asked).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import torch

from blink.executor.passes import length_buckets
from blink.executor.prefix_cache import row_of, shared_structure

SAVED_BLOCKS = 2  # block-aligned save points of a lone prompt: its last ones (answers longer than a block reach back)


@dataclass
class Scored:
    """A saved prefix's scores: `rows` (prompt_logprobs.Rows, `k` alternatives) for its positions but the last
    (their next token lies in the prefix), and `last`, the hidden state at its last position."""

    rows: object
    last: torch.Tensor
    k: int

    @property
    def nbytes(self) -> int:
        return self.rows.nbytes + self.last.numel() * self.last.element_size()


@dataclass
class Run:
    """One group's prefix in this call: from `entry`'s length (0 without one) to `n`, cut at `points` (saved)."""

    n: int
    entry: object = None
    points: list = field(default_factory=list)  # save points past the start, ascending
    cache: object = None  # batch of one, after n tokens
    hidden: list = field(default_factory=list)  # the hidden states of the positions run, a tensor per cut
    snapshots: list = field(default_factory=list)  # (point, a copy of the cache there)

    @property
    def start(self) -> int:
        return self.entry.length if self.entry is not None else 0


class ScoringPrefixes:
    """One call's group prefixes: looked up, run (cut and saved at their points), and scored from the saved rows."""

    def __init__(self, executor, inputs, k: int, ranked: bool):
        self.executor, self.inputs, self.k, self.ranked = executor, inputs, k, ranked
        self.cache = executor.prefix_cache

    def usable(self, entry) -> bool:
        scored = entry.scored
        return scored is not None and scored.k >= self.k and (scored.rows.ranks is not None or not self.ranked)

    def plan(self, g: int) -> Run:
        n = self.inputs.prefix_len[g]
        if not self.cache.active:
            return Run(n)
        keys = self.inputs.groups[g][0].ids[:n]
        run = Run(n, self.cache.lookup(keys, n, self.usable))
        run.points = self.save_points(keys, len(self.inputs.groups[g]) == 1, run.start)
        return run

    def save_points(self, keys: list, lone: bool, start: int) -> list[int]:
        n, block = len(keys), self.cache.block
        points = {n // block * block - i * block for i in range(SAVED_BLOCKS)} if lone else {n}
        met = self.cache.met(keys)
        if met >= block:
            points.add(met)
        return sorted(p for p in points if start < p <= n)

    def run(self) -> dict:
        """Group -> its `Run`, every prefix state computed: the fresh ones' first cuts prefilled together (batched
        as the executor's prefixes are), then each group's remaining cuts one row at a time."""
        executor = self.executor
        runs = {g: self.plan(g) for g in range(len(self.inputs.groups))}
        fresh = [g for g, run in runs.items() if run.entry is None]
        firsts = {g: (runs[g].points or [runs[g].n])[0] for g in fresh}
        for bucket in length_buckets(fresh, firsts, executor.max_rows, executor.pass_cost_tokens, executor.max_cells):
            prefix = executor.prefill(self.inputs, bucket, firsts)
            for g in bucket:
                begin = prefix.width - firsts[g]
                runs[g].cache = row_of(prefix.cache, prefix.row_of[g], begin)
                runs[g].hidden.append(prefix.hidden[prefix.row_of[g], begin:].clone())
                self.snapshot(runs[g], firsts[g])
            del prefix
        for g, run in runs.items():
            if run.entry is not None:  # a copy to run on; nothing to run: the later steps make new tensors
                run.cache = (copy.deepcopy if run.start < run.n else shared_structure)(run.entry.cache)
            done = run.start + sum(len(h) for h in run.hidden)
            for end in sorted({p for p in run.points if p > done} | ({run.n} if run.n > done else set())):
                run.hidden.append(executor.extend(self.inputs, g, run.cache, done, end))
                self.snapshot(run, end)
                done = end
        return runs

    @staticmethod
    def snapshot(run: Run, end: int) -> None:
        if end in run.points:
            run.snapshots.append((end, copy.deepcopy(run.cache)))

    def shared(self, g: int, run: Run, score) -> tuple:
        """Positions 0..n-2 of group `g`'s prefix scored (their next token lies in the prefix: alike in every
        prompt of the group): the saved entry's rows, then `score(states, targets)` over the positions run; and the
        hidden state at position n-1 (it scores each prompt's first token past the prefix). Saves the run's cuts."""
        ids = self.inputs.groups[g][0].ids
        width = self.executor.embed.weight.shape[1]
        new = torch.cat(run.hidden) if run.hidden else self.executor.head.new_zeros((0, width))
        lead = run.entry.scored.last[None] if run.entry is not None else new[:0]
        states = torch.cat([lead, new])  # positions `first`..n-1
        first = run.start - len(lead)
        rows = score(states[:-1], ids[first + 1 : run.n])
        if run.entry is not None:
            rows = run.entry.scored.rows.cut(run.start - 1, self.k, self.ranked) + rows
        for point, cache in run.snapshots:
            scored = Scored(rows.cut(point - 1, self.k, self.ranked), states[point - 1 - first].clone(), self.k)
            self.cache.save(ids[:point], cache, scored)
        run.snapshots.clear()
        return rows, states[-1]

    def remember(self, prompts: list[list[int]]) -> None:
        if self.cache.active:
            self.cache.remember(prompts)
