"""Is what a large decision leaves behind a leak or the C heap's high-water mark? In this process (no server):

    .venv/bin/python bench/stress/heap_retention.py [--questions 128] [--repeats 3]

The demo model decides one state just under the default context limit (32,768 tokens) with `--questions`
questions, `--repeats` times, printing the RSS kept over the RSS before the first (after a small warm-up
decision and a `malloc_trim(0)`, so the heap holds nothing free to start with); then glibc's `malloc_trim(0)`
and the RSS once more. Kept memory that does not grow with repeats and
that `malloc_trim` gives back is the allocator's retention, not a leak (bench/RESULTS.md, issue 12).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: offline.py and the shared modules
import offline  # noqa: F401 - first: the repository importable, the Hub off

# isort: split

import psutil
from hostile_harness import QUESTION, text_of


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    from transformers import AutoTokenizer

    from blink.decide.planner import Engine
    from blink.model.demo import demo_model_dir
    from blink.model.loading import load

    rss_mb = lambda: psutil.Process().memory_info().rss / 2**20  # noqa: E731
    engine = Engine(load(str(demo_model_dir())))
    engine.decide({"state": "warm-up", "questions": {"q": QUESTION}})
    tokenizer = AutoTokenizer.from_pretrained(str(demo_model_dir()))
    n = 150_000
    while len(tokenizer(text_of(n))["input_ids"]) > 32_300:
        n = int(n * 0.99)
    body = {"state": text_of(n), "questions": {f"q{i}": QUESTION for i in range(args.questions)}}
    trim = ctypes.CDLL("libc.so.6").malloc_trim
    trim(0)  # start from a heap with nothing free held back: what follows is the decisions' doing
    base = rss_mb()
    print(
        f"RSS before: {base:.0f} MB; a {len(tokenizer(body['state'])['input_ids'])}-token state, "
        f"{args.questions} questions"
    )
    for i in range(args.repeats):
        engine.decide(body)
        gc.collect()
        print(f"after decision {i + 1}: kept {rss_mb() - base:+.0f} MB")
    trim(0)
    print(f"after malloc_trim(0): kept {rss_mb() - base:+.0f} MB")


if __name__ == "__main__":
    main()
