"""The prefix-state cache: prefilled states kept across calls, so a state seen before is not prefilled again.

An entry is the model's cache (attention KV, and on Qwen3.5 Gated DeltaNet conv and recurrent states) of one row
after a known token prefix, keyed by those tokens exactly (an image token carries its image's hash, see
`Executor._keys`). A recurrent state exists only at the position it was saved at: it cannot be cut back like
attention KV. So entries are saved at chosen points (the end of the state, `Prompt.state_end`), and a new prefix
reuses the longest saved entry it starts with, then runs only the rest. Scoring prompts (echo, prompt_logprobs) do
not say where their context ends: they are saved at block-aligned points and where they meet recent prompts
(`scoring_prefixes.py`), their entries holding what the prefix's positions scored too (`Entry.scored`).

Bounded in bytes, least recently used first out, and the bytes counted are what an entry costs the process: its
tensors' whole storages, plus what holds them (each tensor's objects, each layer's deep-copied object and dicts, the
key's tuple and the token ints it keeps alive), measured on the demo model with `bench/stress/cache_overhead.py`:
without them a full cache cost ~1.3x its budget (bench/RESULTS.md, issue 44). The freed heap that evicted entries and
the passes between saves leave behind is handed back every `TRIM_EVERY_BYTES` of churn. The recent scoring prompts'
tokens are kept as 4-byte arrays and counted in the same budget. Lookups and saves hold a lock: on
a GPU, decisions (the batcher's thread) and scoring prompts (a request's thread) use the cache at once. An entry is
never written once saved (a resumed state runs on a copy). Entries live on the model's device; nothing here crosses a
process boundary.

Bulk rows (the Batch API's, the Sheet's: `saves=False`) read entries but save one only where their prefix repeats:
`repeats` remembers the last `SEEN` prefixes such rows brought (a hash each), and a prefix seen there before is saved
like any other. A table of new states leaves the cache as it was; a table whose rows share a state (or a system
prompt) runs it once.
"""

from __future__ import annotations

import copy
import sys
import threading
from array import array
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass

import torch

from blink.memory import give_back_memory
from blink.plan import common_prefix_length

# Per-entry costs beside the tensors' bytes (bench/stress/cache_overhead.py, tracemalloc over 160 entries of the demo
# model: ~1.35 KiB of deep-copied dicts and objects per layer, ~80 B of Python object per tensor plus its TensorImpl and
# StorageImpl in C++, ~40 B per key token), rounded up.
TENSOR_OVERHEAD = 512
LAYER_OVERHEAD = 1536
KEY_ITEM_OVERHEAD = 40  # a tuple slot and the int object it keeps alive
TRIM_EVERY_BYTES = 32 << 20  # bytes saved or evicted between two trims of the C heap


@dataclass
class Entry:
    length: int  # tokens of prefix it holds
    cache: object  # a batch-of-one model cache after those tokens
    nbytes: int
    scored: object = None  # a scoring prompt's entry: what its positions scored (scoring_prefixes.Scored)


def storage_bytes(tensors) -> int:
    """Bytes of the storages behind `tensors`, each once: a view keeps its whole storage alive, not its numel."""
    storages = {}
    for tensor in tensors:
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


def entry_bytes(keys, cache) -> int:
    """What keeping `cache` under `keys` costs the process: its storages and the objects around them."""
    tensors = [t for _, _, t in layer_tensors(cache)]
    return (
        storage_bytes(tensors)
        + TENSOR_OVERHEAD * len(tensors)
        + LAYER_OVERHEAD * len(cache.layers)
        + sys.getsizeof(())
        + KEY_ITEM_OVERHEAD * len(keys)
    )


def layer_tensors(cache):
    """(layer, attribute, tensor) for every tensor a model cache holds (KV; conv and recurrent states by index)."""
    for layer in cache.layers:
        for name, value in vars(layer).items():
            for tensor in value.values() if isinstance(value, dict) else [value]:
                if isinstance(tensor, torch.Tensor) and tensor.dim() >= 1:
                    yield layer, name, tensor


def row_of(cache, row: int, start: int):
    """A batch-of-one copy of `cache`'s `row`, its attention KV from sequence position `start` (dropping the left
    padding of a batched prefill: the kept keys already carry their rotary positions). Every other attribute is
    deep-copied, so the copy shares nothing with the batch's cache."""
    memo = {}
    for _, name, tensor in layer_tensors(cache):
        piece = tensor[row : row + 1]
        if name in ("keys", "values"):
            piece = piece[:, :, start:]
        memo[id(tensor)] = piece.clone()
    return copy.deepcopy(cache, memo)


def shared_structure(cache):
    """A copy of `cache`'s structure (its layers, their lists and dicts) holding the very same tensors: for a cache
    about to be reordered (`reorder_cache` replaces every tensor it holds, test_executor holds it to that)."""
    return copy.deepcopy(cache, {id(t): t for _, _, t in layer_tensors(cache)})


class PrefixCache:
    BLOCK_TOKENS = 32  # the default of `prefix_block_tokens` (blink/settings.py)
    RECENT = 8  # scoring prompts remembered (their tokens only): where the next one meets them is a save point
    SEEN = 4096  # bulk rows' prefixes remembered (a hash each, ~100 bytes): one met again there is saved

    def __init__(self, max_bytes: int, block_tokens: int | None = None):
        self.max_bytes = int(max_bytes)
        self.block = int(block_tokens or self.BLOCK_TOKENS)  # scoring prompts are saved at multiples of it
        self.recent: deque = deque(maxlen=self.RECENT)  # token arrays ("i": 4 bytes a token, not 36 as ints)
        self.recent_bytes = 0  # theirs, counted in `bytes`
        self.lock = threading.Lock()
        self.entries: OrderedDict[tuple, Entry] = OrderedDict()
        self.lengths: Counter = Counter()  # saved prefix lengths: the only places a lookup can stop
        self.bytes = 0
        self.churn = 0  # bytes saved or evicted since the C heap was last trimmed
        self.hits = self.misses = self.cached_tokens = 0
        self.seen: OrderedDict[int, None] = OrderedDict()  # bulk rows' prefixes, by hash, most recent last

    @property
    def active(self) -> bool:
        return self.max_bytes > 0

    def lookup(self, keys: list, limit: int, usable=None) -> Entry | None:
        """The longest saved entry whose tokens start `keys`, holding at most `limit` tokens (most recent use), and
        for which `usable(entry)` holds when given."""
        with self.lock:
            return self._lookup(keys, limit, usable)

    def _lookup(self, keys: list, limit: int, usable) -> Entry | None:
        for length in sorted((n for n in self.lengths if n <= limit), reverse=True):
            entry = self.entries.get(tuple(keys[:length]))
            if entry is not None and (usable is None or usable(entry)):
                self.entries.move_to_end(tuple(keys[:length]))
                self.hits += 1
                self.cached_tokens += length
                return entry
        self.misses += 1
        return None

    def save(self, keys: list, cache, scored=None) -> None:
        """Keep `cache` (batch of one, after `keys`) unless it alone exceeds the budget; evict the oldest to fit. An
        entry with `scored` (its `nbytes` counted) replaces one saved before under the same tokens."""
        nbytes = entry_bytes(keys, cache) + (scored.nbytes if scored is not None else 0)
        with self.lock:
            self._save(tuple(keys), cache, scored, nbytes)

    def _save(self, key: tuple, cache, scored, nbytes: int) -> None:
        if not key or nbytes > self.max_bytes or (key in self.entries and scored is None):
            return
        if key in self.entries:
            self._drop(key)
        self.entries[key] = Entry(len(key), cache, nbytes, scored)
        self.lengths[len(key)] += 1
        self.bytes += nbytes
        self.churn += nbytes
        self._fit()

    def _fit(self) -> None:
        """Oldest entries out until the budget holds."""
        while self.bytes > self.max_bytes and self.entries:
            self._drop(next(iter(self.entries)))
        if self.churn >= TRIM_EVERY_BYTES:  # glibc keeps the freed heap otherwise (coalesced, in the background)
            self.churn = 0
            give_back_memory()

    def repeats(self, keys) -> bool:
        """Whether a bulk row brought the prefix `keys` before (among the last `SEEN`); remembers it either way."""
        key = hash(tuple(keys))
        with self.lock:
            if key in self.seen:
                self.seen.move_to_end(key)
                return True
            self.seen[key] = None
            if len(self.seen) > self.SEEN:
                self.seen.popitem(last=False)
            return False

    def remember(self, prompts: list[list]) -> None:
        """Scoring prompts' tokens, kept (the last `RECENT`) to choose the next ones' save points."""
        kept = [array("i", p) for p in prompts[-self.RECENT :]]
        with self.lock:
            self.recent.extend(kept)
            while self.recent and sum(map(sys.getsizeof, self.recent)) > self.max_bytes // 4:
                self.recent.popleft()  # a small budget keeps fewer (a prompt past a quarter of it: none)
            held = sum(map(sys.getsizeof, self.recent))
            self.bytes += held - self.recent_bytes
            self.recent_bytes = held
            self._fit()

    def met(self, keys: list) -> int:
        """The longest start `keys` shares with a remembered scoring prompt."""
        probe = array("i", keys)
        with self.lock:
            recent = list(self.recent)
        return max((common_prefix_length([seen, probe]) for seen in recent), default=0)

    def _drop(self, key: tuple) -> None:
        old = self.entries.pop(key)
        self.bytes -= old.nbytes
        self.churn += old.nbytes
        self.lengths[old.length] -= 1
        if not self.lengths[old.length]:
            del self.lengths[old.length]

    def stats(self) -> dict:
        return {
            "active": self.active,
            "max_mib": self.max_bytes / 2**20,
            "used_mib": round(self.bytes / 2**20, 3),
            "entries": len(self.entries),
            "hits": self.hits,
            "misses": self.misses,
            "cached_tokens": self.cached_tokens,
        }
