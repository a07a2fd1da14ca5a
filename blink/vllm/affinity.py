"""Which replica a prompt should go to, so that the prefix it shares with earlier prompts is still cached there.

Two signals, the first that applies wins:

1. a table of where recent prefixes went: the prompt's token ids cut into blocks of vLLM's prefix-cache size
   (16 tokens), each block hashed with everything before it (as vLLM hashes its cache blocks), each hash
   remembered with the replica that last served it (an LRU of `capacity` blocks). A prompt goes where its
   longest remembered prefix went, when that prefix is at least `min_match_tokens` long: the next question about
   a state, or the next turn of a conversation, follows the first one whatever the state's length.
2. rendezvous hashing of the prompt's first `key_tokens` tokens with each replica's URL, for prompts the table
   knows nothing useful about: new states spread over the replicas, and every blink process (each with its own
   table) sends the same new state to the same replica.
"""

from __future__ import annotations

import hashlib
import threading
from array import array
from collections import OrderedDict
from dataclasses import dataclass

BLOCK_TOKENS = 16  # vLLM's default prefix-cache block size


@dataclass(frozen=True)
class Route:
    key: bytes  # the rendezvous key
    chain: list[bytes]  # the first prompt's chained block hashes: what is looked up
    blocks: list[bytes]  # every prompt's block hashes (the shared ones once): what is remembered


def block_hashes(ids: list[int], max_blocks: int) -> list[bytes]:
    """Chained hashes of the prompt's full blocks: hash i covers tokens [0, 16 (i + 1))."""
    out, previous = [], b""
    for start in range(0, min(len(ids) // BLOCK_TOKENS, max_blocks) * BLOCK_TOKENS, BLOCK_TOKENS):
        previous = hashlib.blake2b(
            previous + array("q", ids[start : start + BLOCK_TOKENS]).tobytes(), digest_size=16
        ).digest()
        out.append(previous)
    return out


def route_for(prompts: list[list[int]], key_tokens: int = 256, max_blocks: int = 4096) -> Route:
    """The route of one request's prompts (they all go to one replica): its first prompt's head as the rendezvous
    key and its blocks to look up; every prompt's blocks to remember (the state's blocks they share, once)."""
    chains = [block_hashes(ids, max_blocks) for ids in prompts]
    blocks = list(dict.fromkeys(h for chain in chains for h in chain))
    return Route(array("q", prompts[0][:key_tokens]).tobytes(), chains[0], blocks)


def rendezvous(key: bytes, urls: list[str]) -> list[str]:
    """The URLs in rendezvous (highest random weight) order for `key`."""
    return sorted(urls, key=lambda url: hashlib.blake2b(key + url.encode(), digest_size=8).digest(), reverse=True)


class PrefixTable:
    """Block hash -> the URL of the replica that last served a prompt with that prefix. Thread-safe."""

    def __init__(self, capacity: int = 1 << 16, min_match_tokens: int = 64):
        self.capacity = capacity
        self.min_match_blocks = max(1, -(-min_match_tokens // BLOCK_TOKENS))
        self.where: OrderedDict[bytes, str] = OrderedDict()
        self.lock = threading.Lock()

    def lookup(self, route: Route) -> str | None:
        """The replica of the longest remembered prefix of the route's first prompt, if long enough."""
        with self.lock:
            # chained hashes: a remembered block n means its whole prefix went there (earlier ones may be evicted)
            for n in range(len(route.chain) - 1, self.min_match_blocks - 2, -1):
                if (url := self.where.get(route.chain[n])) is not None:
                    return url
            return None

    def remember(self, route: Route, url: str) -> None:
        with self.lock:
            for h in route.blocks:
                self.where[h] = url
                self.where.move_to_end(h)
            while len(self.where) > self.capacity:
                self.where.popitem(last=False)
