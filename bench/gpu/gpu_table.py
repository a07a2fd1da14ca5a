"""The GPU bench's figures and its report (bench/gpu/gpu_bench.py measures): Kev's published numbers it is set beside,
the table bench/RESULTS.md quotes, and the raw figures as JSON."""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path

KEV = [  # (name, state tokens, questions, Kev-4B on an H100: new / cached ms, from research/peers.md §5)
    ("6 q, short text", 128, 6, "18.0 / 13.0 ms"),
    ("5 q, 2,200-token text", 2200, 5, "90.3 / 22.7 ms"),
]
KEV_THROUGHPUT = "93.6 req/s (H100, HTTP)"


@dataclass
class Check:
    """Ours vs the plain path in the same dtype (max |diff| `worst`, `agree` argmaxes of `total`, within
    `bound`) and, where the fp32 plain path answered (`drift_measured`), ours vs it."""

    bound: float
    drift_measured: bool
    worst: float = 0.0
    agree: int = 0
    total: int = 0
    drift: float = 0.0
    drift_agree: int = 0


@dataclass
class Results:
    """One run's figures: what the table prints and the JSON holds."""

    args: argparse.Namespace
    gpu: str
    params: int
    kernels: str
    check: Check
    rows: list[dict]
    thr: dict
    tokens_all: int
    peak: int | None
    sweep: dict
    default_cost: float
    honesty: dict
    moderation: dict
    bulk: dict | None = None  # run-batch's row (bench/gpu/gpu_bulk.py)


def print_table(res: Results) -> None:
    """The run as bench/RESULTS.md quotes it: a heading, the checks, then one markdown table."""
    from blink.model.loading import versions

    args, c, thr, honesty = res.args, res.check, res.thr, res.honesty
    print(
        f"\nblink GPU bench — {time.strftime('%Y-%m-%d %H:%M')} — {res.gpu} — {args.shape} shape (ASSUMED Qwen3.5-4B "
        f"shape, random weights), {res.params / 1e9:.2f}B params, {args.dtype}, {res.kernels} — versions {versions()}"
    )
    print(
        f"check vs plain per-question forward: max |Δp| = {c.worst:.2e} ({'≤' if c.worst <= c.bound else '>'} "
        f"bound {c.bound:g}), argmax agree {c.agree}/{c.total}"
    )
    if c.drift_measured:
        print(
            f"{args.dtype} drift: ours in {args.dtype} vs the plain path in fp32 (same weights): "
            f"max |Δp| = {c.drift:.2e} "
            f"({'≤' if c.drift <= 5e-2 else '>'} stated bound 5e-2), argmax agree {c.drift_agree}/{c.total}"
        )
    print(
        "| cell | tokens run | ours: model | ours: prepare+model+answer | plain per-question | plain ÷ ours | "
        "Kev-4B H100 new / cached |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in res.rows:
        print(
            f"| {r['cell']} | {r['tokens']} | {r['ours_ms']:.1f} ms | {r['ours_e2e_ms']:.1f} ms | "
            f"{r['plain_ms']:.1f} ms | {r['plain_ms'] / r['ours_ms']:.2f}× | {r['kev']} |"
        )
    print(
        f"| throughput, {thr['clients']} clients × 6 q (128-token states) | {res.tokens_all} | "
        f"{thr['batched_rps']:.1f} req/s batched"
        f" | {thr['batched_e2e_rps']:.1f} req/s batched | {thr['unbatched_rps']:.1f} req/s unbatched | "
        f"{thr['batched_rps'] / thr['unbatched_rps']:.2f}× | {KEV_THROUGHPUT} |"
    )
    m = res.moderation
    print(
        f"| moderation, {m['categories']} categories (issue 42: ≤ 1.3× one pass over the input) | "
        f"{m['tokens_run']} | {m['ours_ms']:.1f} ms | | one pass over the {m['input_tokens']}-token input: "
        f"{m['pass_ms']:.1f} ms | {m['ours_ms'] / m['pass_ms']:.2f}× the pass | |"
    )
    if res.bulk is not None:
        from gpu_bulk import bulk_line

        print(bulk_line(res.bulk))
    if res.peak is not None:
        print(f"| peak GPU memory allocated | | {res.peak / 2**30:.1f} GiB | | | | |")
    for cost, times in res.sweep.items():
        print(
            f"| bucketing pass cost {cost:g} tokens{' (default)' if cost == res.default_cost else ''} | | "
            + " / ".join(f"{ms:.1f}" for ms in times)
            + " ms (Kev cells / batch) | | | | |"
        )
    print(
        f"| duration honesty ({honesty['calls']} calls, Space settings) | | {honesty['requested_s']:.0f} s "
        f"requested / {honesty['used_s']:.2f} s used = {honesty['ratio']:.1f}× | cut off: {honesty['cut_off']} | "
        f"calls over 1 s: {honesty['long_calls']}, {honesty['long_ratio']:.2f}× | | |"
    )


def write_json(res: Results, path: str) -> None:
    """The run's raw figures (bench/gpu/gpu.sh keeps them beside the table)."""
    c = res.check
    Path(path).write_text(
        json.dumps(
            {
                "gpu": res.gpu,
                "shape": res.args.shape,
                "params": res.params,
                "kernels": res.kernels,
                "check": {"max_abs_diff": c.worst, "argmax_agree": [c.agree, c.total]},
                "drift_vs_fp32": {
                    "max_abs_diff": c.drift if c.drift_measured else None,
                    "argmax_agree": [c.drift_agree, c.total],
                },
                "cells": res.rows,
                "throughput": res.thr,
                "peak_bytes": res.peak,
                "pass_cost_sweep": res.sweep,
                "durations": res.honesty,
                "moderation": res.moderation,
                "run_batch": res.bulk,
            },
            indent=1,
        )
    )
