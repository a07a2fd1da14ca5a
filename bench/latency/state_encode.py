"""Encoding a state: `tokenizers` (the library) against tiktoken over the same ranks (`blink/decide/fast_bpe.py`),
in one process, the two sides alternating, medians per size.

    .venv/bin/python bench/latency/state_encode.py [--reps 40]

Rows: ASCII states of ~64 / 1,000 / 10,000 tokens (English-like sentences drawn from the bench's word list), each
encoded `warm` (back to back, the same thread) and `cold` (after a 20 ms sleep, as a request's encode runs after
the event loop and other threads had the core). Both sides return ids and end offsets; the ids are checked equal.
`library / fast` > 1 means the fast path is faster.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: offline.py and the shared modules
from offline import ROOT  # noqa: F401 - first: the repository importable, the Hub off

# isort: split

import workload


def state(tokens: int, seed: int) -> str:
    rng = random.Random(seed)
    words = []
    while len(words) < tokens:
        words += rng.sample(workload.WORDS, 8) + [rng.choice([".", ",", ";", "\n"])]
    return " ".join(words[:tokens])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=40)
    args = parser.parse_args()

    from blink.decide.prefix_encoder import PrefixReusingEncoder
    from blink.model.demo import build_tokenizer

    encoder = PrefixReusingEncoder(build_tokenizer())
    assert encoder.fast is not None, "the demo tokenizer takes the fast path"

    sides = {"library": encoder.library_encode, "fast": encoder.fast.encode}
    print(f"{'tokens':>7} {'mode':>5} {'library µs':>11} {'fast µs':>9} {'library / fast':>15}")
    for tokens in (64, 1000, 10000):
        for mode in ("warm", "cold"):
            times = {name: [] for name in sides}
            for rep in range(args.reps):
                text = state(tokens, rep)  # a new state each rep, the same one to both sides
                order = list(sides) if rep % 2 else list(sides)[::-1]
                answers = []
                for name in order:
                    if mode == "cold":
                        time.sleep(0.02)
                    else:
                        sides[name](text)  # once before: warm means this text was just encoded
                    start = time.perf_counter()
                    answers.append(sides[name](text))
                    times[name].append(time.perf_counter() - start)
                assert answers[0] == answers[1], "the fast path must give the library's ids and offsets"
            lib, fast = (statistics.median(times[name]) * 1e6 for name in sides)
            n = len(encoder.library_encode(state(tokens, 0))[0])
            print(f"{n:>7} {mode:>5} {lib:>11.0f} {fast:>9.0f} {lib / fast:>14.1f}x")


if __name__ == "__main__":
    main()
