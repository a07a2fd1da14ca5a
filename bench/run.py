"""Side-by-side benchmark: our server vs `transformers serve` vs a plain per-question forward, one table.

    .venv/bin/python bench/run.py [--quick] [--model demo|large|demo,large|PATH] [--json out.json]

Every row is measured in this one run, both (all three) sides on the same model and the same request bodies,
alternating between the sides rep by rep so they share the machine's noise; cells are medians. Ratios are
written so that > 1 means we are better. See bench/README.md for what each row means and the targets.

Sides:
  ours    `python -m blink serve --model M` over HTTP (batching off for the latency rows)
  TS      `transformers serve M` over HTTP, its `/v1/systemone` (DecisionPipeline: one fresh full forward per
          question, `logits_to_keep` at the read positions, no cache reuse)
  plain   in this process: for each question's prompt (the same token ids our server builds), one fresh forward
          with `use_cache=False, logits_to_keep=<read positions>` (`Executor.reference`, which the exactness
          tests compare against too); only the forwards are timed (no tokenizing,
          no HTTP): the model cost a server without prefix sharing cannot go below.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import offline  # noqa: F401 - first: the repository importable, the Hub off

# isort: split

import httpx
import psutil
import workload
from honesty import duration_honesty
from servers import Server, blink_serve, closed_loop

# (state tokens, questions): the performance issue's grid, plus the engine issue's 1,000-token state at 1/4/16
FULL_GRID = [
    (64, 1),
    (64, 6),
    (64, 16),
    (64, 64),
    (512, 1),
    (512, 6),
    (512, 16),
    (512, 64),
    (1000, 1),
    (1000, 4),
    (1000, 16),
    (2200, 1),
    (2200, 6),
    (2200, 16),
    (2200, 64),
]
QUICK_GRID = [(64, 1), (64, 16), (1000, 1), (1000, 16)]
FULL_CLIENTS = {1: 8, 16: 3, 64: 2}  # concurrent clients -> requests each (closed loop)
QUICK_CLIENTS = {1: 3, 16: 2}
THROUGHPUT_STATE = 64  # each client: its own ~64-token state, one question per request

TARGET_TS_16 = 4.0  # ours >= 4x faster than transformers serve at 16 questions
TARGET_TS_1 = 1.0  # never slower at 1 question
TARGET_BATCHING_16 = 2.0  # batched >= 2x unbatched throughput at 16 clients
TARGET_OUTSIDE = 0.10  # < 10% of a 16-question request's time outside the model (larger model)
BF16_BOUND = 5e-2  # the bf16 drift we state: |p_bf16 - p_fp32| per probability
TARGET_DURATION_RATIO = 2.0  # GPU seconds requested <= 2x used, over calls of more than 1 s of work


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def parse_server_timing(header: str | None) -> dict:
    out = {}
    for part in (header or "").split(","):
        name, _, rest = part.strip().partition(";")
        if rest.startswith("dur="):
            out[name] = float(rest[4:])
    return out


# the three sides of a latency row ---------------------------------------------------------------------------
class Sides:
    def __init__(self, engine, ours: Server, ts: Server):
        self.engine = engine
        self.servers = {"ours": ours, "ts": ts}
        self.clients = {name: httpx.Client(base_url=s.url, timeout=900) for name, s in self.servers.items()}

    def post(self, name: str, body: dict):
        """POST to one server; time it. If the server process died, restart it and send the request again."""
        for attempt in (1, 2):
            try:
                t = time.perf_counter()
                r = self.clients[name].post("/v1/systemone", json=body)
                return r, (time.perf_counter() - t) * 1000
            except httpx.TransportError:
                server = self.servers[name]
                if attempt == 2 or not server.revive():
                    raise
                self.clients[name] = httpx.Client(base_url=server.url, timeout=900)
                self.post(name, body)  # warm the new process before timing

    def ours(self, body: dict) -> dict:
        r, ms = self.post("ours", body)
        r.raise_for_status()
        data = r.json()
        timing = parse_server_timing(r.headers.get("server-timing"))
        return {
            "ms": ms,
            "model_ms": timing.get("model", math.nan),
            "timing": timing,
            "answers": data["answers"],
            "input_tokens": data["usage"]["input_tokens"],
        }

    def ts(self, body: dict) -> dict:
        r, ms = self.post("ts", body)
        if r.status_code != 200:
            raise RuntimeError(f"transformers serve answered {r.status_code}: {r.text[:500]}")
        data = r.json()
        return {"ms": ms, "answers": data["answers"], "input_tokens": data["usage"]["input_tokens"]}

    def plain(self, body: dict) -> dict:
        prepared = self.engine.prepare(body)  # tokenizing is not timed: this side is model time only
        t = time.perf_counter()
        scores = [self.engine.executor.reference(prompt) for prompt in prepared.prompts]
        ms = (time.perf_counter() - t) * 1000
        return {
            "ms": ms,
            "answers": self.engine.answer(prepared, scores),
            "input_tokens": sum(len(p.ids) for p in prepared.prompts),
        }


def bf16_drift(sides: Sides, model_name: str, quick: bool) -> dict:
    """Our executor on a bf16 copy of the model against the fp32 plain forward, on the benchmark's own bodies:
    the drift bf16 brings (what the GPU path runs in), measured on this CPU's bf16 kernels."""
    import copy
    import dataclasses

    import torch

    from blink.decide.planner import Engine

    loaded = sides.engine.loaded
    half = Engine(dataclasses.replace(loaded, model=copy.deepcopy(loaded.model).to(torch.bfloat16)))
    worst, agree, total = 0.0, 0, 0
    cells = [(64, 6), (512, 16)] if quick else [(64, 6), (64, 16), (512, 16), (2200, 6), (2200, 16)]
    for i, (state, n_q) in enumerate(cells):
        body = workload.body(sides.engine.tokenizer, model_name, state, n_q, seed=700 + i)
        ours16, ref = half.decide(body), sides.plain(body)["answers"]
        worst = max(worst, workload.max_abs_diff(ours16, ref))
        agree += sum(workload.argmax(ours16[q]) == workload.argmax(ref[q]) for q in ref)
        total += len(ref)
    return {"max_abs_diff": worst, "argmax_agree": agree, "answers": total, "cells": cells}


def mixed_batch(engine, model_name: str) -> dict:
    """One model call for a batch of requests about texts of very different lengths (1 of 2,200 tokens, 15 of
    64, one question each) vs one call per request, in this process: what cross-request batching costs when
    the batch is lopsided (its prefixes are not all padded to the longest)."""
    bodies = [workload.body(engine.tokenizer, model_name, 2200, 1, seed=31)]
    bodies += [workload.body(engine.tokenizer, model_name, 64, 1, seed=32 + i) for i in range(15)]
    plans = [engine.prepare(b).prompts for b in bodies]
    engine.score(plans)  # warm
    one, each = [], []
    for _ in range(3):
        t = time.perf_counter()
        engine.score(plans)
        one.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        for plan in plans:
            engine.score([plan])
        each.append((time.perf_counter() - t) * 1000)
    return {"one_call_ms": median(one), "each_ms": median(each), "x": median(each) / median(one)}


def median(xs):
    xs = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return statistics.median(xs) if xs else math.nan


SIDES = ["ours", "ts", "plain"]  # a cell's sides, in the order a rep's rotation starts from
MIN_REPS = {"ours": 3, "ts": 1, "plain": 1}  # samples a side takes in every cell, whatever the time budget


def measure_cell(
    sides: Sides, tokenizer, model_name: str, state: int, n_q: int, budget_s: float, max_reps: int
) -> dict:
    """Reps of the same cell; in each rep all sides answer the same body, in a rotating order. A side keeps
    sampling while its minimum is not met, or while the cell's time budget has room for another sample."""
    run = {"ours": sides.ours, "ts": sides.ts, "plain": sides.plain}
    samples = {n: [] for n in SIDES}
    diffs = {"ours_vs_plain": 0.0, "ts_vs_plain": 0.0}
    start = time.perf_counter()
    rep = 0
    while rep < max_reps:
        want = sides_wanted(samples, time.perf_counter() - start, budget_s)
        if not want:
            break
        body = workload.body(tokenizer, model_name, state, n_q, seed=100_000 + 1000 * state + 10 * n_q + rep)
        got = {}
        for k in range(len(want)):
            name = want[(k + rep) % len(want)]
            got[name] = run[name](body)
            samples[name].append(got[name])
        widen_diffs(diffs, got)
        rep += 1
    return cell_of(state, n_q, samples, diffs)


def sides_wanted(samples: dict, elapsed: float, budget_s: float) -> list[str]:
    """The sides that sample again: below their minimum, or whose mean sample still fits in the cell's budget."""
    return [
        n
        for n in SIDES
        if len(samples[n]) < MIN_REPS[n]
        or (samples[n] and elapsed + statistics.mean(s["ms"] for s in samples[n]) / 1000 <= budget_s)
    ]


def widen_diffs(diffs: dict, got: dict) -> None:
    """Raise each side's largest |diff| from the plain path's answers with this rep's, where both answered."""
    if "plain" in got:
        for side in ("ours", "ts"):
            if side in got:
                diffs[f"{side}_vs_plain"] = max(
                    diffs[f"{side}_vs_plain"], workload.max_abs_diff(got[side]["answers"], got["plain"]["answers"])
                )


def cell_of(state: int, n_q: int, samples: dict, diffs: dict) -> dict:
    """The cell's row: medians of each side's samples, our phases and shares, and the ratios (> 1: we are faster)."""
    ours = samples["ours"]
    outside = [(s["ms"] - s["model_ms"]) / s["ms"] for s in ours]
    cell = {
        "state_tokens": state,
        "questions": n_q,
        "ours_ms": median([s["ms"] for s in ours]),
        "ts_ms": median([s["ms"] for s in samples["ts"]]),
        "plain_ms": median([s["ms"] for s in samples["plain"]]),
        "ours_model_ms": median([s["model_ms"] for s in ours]),
        "ours_phases_ms": {k: median([s["timing"].get(k) for s in ours]) for k in ours[0]["timing"]},
        "outside_share": median(outside),
        "prepare_share": median([s["timing"].get("prepare", math.nan) / s["ms"] for s in ours]),
        "n": {n: len(samples[n]) for n in SIDES},
        "input_tokens": {
            "ours": ours[0]["input_tokens"],
            "ts": samples["ts"][0]["input_tokens"],
            "plain": samples["plain"][0]["input_tokens"],
        },
        "max_abs_diff": diffs,
        "calls": [(s["input_tokens"], s["model_ms"] / 1000) for s in ours],  # for duration honesty
    }
    cell["x_ts"] = cell["ts_ms"] / cell["ours_ms"]
    cell["x_plain"] = cell["plain_ms"] / cell["ours_ms"]
    return cell


# throughput -----------------------------------------------------------------------------------------------
def measure_throughput(
    unbatched: Server, batched: Server, tokenizer, model_name: str, clients: int, per_client: int, reps: int = 2
) -> dict:
    bodies = [
        [
            {
                "model": model_name,
                "state": workload.text_of_tokens(tokenizer, THROUGHPUT_STATE, seed=7000 + c),
                "questions": workload.questions(1, seed=c * 31 + k),
            }
            for k in range(per_client)
        ]
        for c in range(clients)
    ]
    got = {"unbatched": [], "batched": []}
    servers = {"unbatched": unbatched, "batched": batched}
    before = batcher_stats(batched)
    for rep in range(reps):
        order = ["unbatched", "batched"] if rep % 2 == 0 else ["batched", "unbatched"]
        for name in order:
            servers[name].revive()
            got[name].append(asyncio.run(closed_loop(servers[name].url, bodies)))
    after = batcher_stats(batched)
    batches = after.get("batches", 0) - before.get("batches", 0)
    row = {
        "clients": clients,
        "requests_each": per_client,
        "reps": reps,
        "unbatched_rps": median([g["rps"] for g in got["unbatched"]]),
        "batched_rps": median([g["rps"] for g in got["batched"]]),
        "errors": {k: sum(len(g["errors"]) for g in v) for k, v in got.items()},
        "mean_batch": (after.get("requests", 0) - before.get("requests", 0)) / batches if batches else math.nan,
    }
    row["x_batching"] = row["batched_rps"] / row["unbatched_rps"]
    return row


def batcher_stats(server: Server) -> dict:
    """The batcher's counters from our /healthz (batches and requests so far), for the mean batch size."""
    try:
        return httpx.get(server.url + "/healthz", timeout=10).json().get("batching", {})
    except (httpx.HTTPError, ValueError):
        return {}


# one model -----------------------------------------------------------------------------------------------
def resolve_model(spec: str) -> tuple[str, Path]:
    if spec in ("demo", "large"):
        from blink.model.demo import SHAPES, demo_model_dir, make_demo_model

        path = demo_model_dir(spec)
        config = json.loads((path / "config.json").read_text())
        if any(config.get(k) != v for k, v in SHAPES[spec].items() if k != "mrope_section"):
            log(f"{path} was built with another {spec!r} shape: rebuilding it")  # the cache keys on the name only
            make_demo_model(path, spec)
        return spec, path
    return Path(spec).name, Path(spec)


def bench_model(spec: str, quick: bool, window_ms: float, logdir: Path) -> dict:
    label, path = resolve_model(spec)
    ts_bin = str(Path(sys.executable).parent / "transformers")
    common = blink_serve(
        "--host", "127.0.0.1", "--log-level", "warning", "--max-queued-requests", "512", model=str(path)
    )
    log(f"{label}: starting servers ({path})")
    servers = {
        "ours": Server(f"{label}-ours", common + ["--batch-window-ms", "0"], logdir),
        "batched": Server(
            f"{label}-ours-batched",
            common + ["--batch-window-ms", str(window_ms), "--max-batch-requests", "64"],
            logdir,
        ),
        "ts": Server(
            f"{label}-transformers-serve",
            [ts_bin, "serve", str(path), "--host", "127.0.0.1", "--port", "{port}", "--device", "cpu"]
            + ["--log-level", "error"],
            logdir,
            health="/health",
        ),
    }
    try:
        from blink.decide.planner import Engine
        from blink.model.loading import load

        engine = Engine(load(str(path)))  # the plain side's model, in this process (fp32 CPU, like the servers)
        params = sum(p.numel() for p in engine.loaded.model.parameters())
        for s in servers.values():
            s.wait_ready()
        log(f"{label}: servers ready ({params / 1e6:.0f}M params); warming up")
        sides = Sides(engine, servers["ours"], servers["ts"])
        model_name = str(path)  # transformers serve (pinned to this model) insists on it; ours accepts any name
        warm = workload.body(engine.tokenizer, model_name, 200, 3, seed=1)
        for _ in range(2):
            sides.ours(warm), sides.ts(warm), sides.plain(warm)
        asyncio.run(closed_loop(servers["batched"].url, [[warm]] * 4))

        grid = QUICK_GRID if quick else FULL_GRID
        budget = 4.0 if quick else (6.0 if label == "demo" else 10.0)
        cells = []
        for state, n_q in grid:
            cell = measure_cell(sides, engine.tokenizer, model_name, state, n_q, budget, max_reps=3 if quick else 7)
            cells.append(cell)
            log(
                f"{label}: {state:>5} tok x {n_q:>2} q: ours {cell['ours_ms']:.1f} ms, TS {cell['ts_ms']:.1f} ms "
                f"(x{cell['x_ts']:.2f}), plain {cell['plain_ms']:.1f} ms (x{cell['x_plain']:.2f}), "
                f"outside {cell['outside_share']:.1%} (prepare {cell['prepare_share']:.1%}), n={cell['n']}"
            )
        throughput = []
        for clients, each in (QUICK_CLIENTS if quick else FULL_CLIENTS).items():
            row = measure_throughput(servers["ours"], servers["batched"], engine.tokenizer, model_name, clients, each)
            throughput.append(row)
            log(
                f"{label}: {clients} clients: unbatched {row['unbatched_rps']:.1f} req/s, batched "
                f"{row['batched_rps']:.1f} req/s (x{row['x_batching']:.2f}), mean batch {row['mean_batch']:.1f}, "
                f"errors {row['errors']}"
            )
        calls = [c for cell in cells for c in cell.pop("calls")]
        bench_rss = psutil.Process().memory_info().rss
    finally:
        for s in servers.values():
            s.stop()
    log(f"{label}: bf16 drift against the fp32 plain forward; a lopsided batch")
    drift = bf16_drift(sides, model_name, quick)
    lopsided = mixed_batch(sides.engine, model_name)
    return {
        "model": label,
        "path": str(path),
        "params": params,
        "cells": cells,
        "throughput": throughput,
        "memory": {name: {"ready_rss": s.ready_rss, "peak_rss": s.peak_rss} for name, s in servers.items()}
        | {"bench_process_rss": bench_rss},
        "durations": duration_honesty(calls),
        "bf16": drift,
        "mixed_batch": lopsided,
        "batch_window_ms": window_ms,
        "restarts": [why for s in servers.values() for why in s.restarts],
    }


# the table ------------------------------------------------------------------------------------------------
def fmt_ms(ms: float) -> str:
    return "—" if math.isnan(ms) else (f"{ms:.0f} ms" if ms >= 100 else f"{ms:.1f} ms")


def mark(ok: bool) -> str:
    return "✓" if ok else "✗ MISSED"


def table(results: list[dict], larger: str | None) -> str:
    head = [
        "model",
        "row",
        "ours",
        "transformers serve",
        "plain fwd / unbatched",
        "TS ÷ ours",
        "plain ÷ ours / batched ÷ unbatched",
        "outside model",
        "n ours/TS/plain",
        "target",
    ]
    rows = []
    for res in results:
        m = res["model"]
        for c in res["cells"]:
            targets = []
            if c["questions"] == 16:
                targets.append(f"TS ≥{TARGET_TS_16:g}× {mark(c['x_ts'] >= TARGET_TS_16)}")
                if m == larger:
                    targets.append(f"outside <{TARGET_OUTSIDE:.0%} {mark(c['outside_share'] < TARGET_OUTSIDE)}")
            if c["questions"] == 1:
                targets.append(f"TS ≥{TARGET_TS_1:g}× {mark(c['x_ts'] >= TARGET_TS_1)}")
            n = c["n"]
            rows.append(
                [
                    m,
                    f"latency {c['state_tokens']} tok × {c['questions']} q",
                    fmt_ms(c["ours_ms"]),
                    fmt_ms(c["ts_ms"]),
                    fmt_ms(c["plain_ms"]),
                    f"{c['x_ts']:.2f}×",
                    f"{c['x_plain']:.2f}×",
                    f"{c['outside_share']:.1%} (prepare {c['prepare_share']:.0%})",
                    f"{n['ours']}/{n['ts']}/{n['plain']}",
                    "; ".join(targets),
                ]
            )
        for t in res["throughput"]:
            target = (
                f"≥{TARGET_BATCHING_16:g}× {mark(t['x_batching'] >= TARGET_BATCHING_16)}" if t["clients"] == 16 else ""
            )
            errs = sum(t["errors"].values())
            rows.append(
                [
                    m,
                    f"throughput {t['clients']} clients × 1 q ({THROUGHPUT_STATE} tok each)"
                    + (f", {errs} errors" if errs else ""),
                    f"{t['batched_rps']:.1f} req/s batched (mean batch {t['mean_batch']:.1f})",
                    "—",
                    f"{t['unbatched_rps']:.1f} req/s",
                    "—",
                    f"{t['x_batching']:.2f}×",
                    "",
                    f"{t['reps']}×{t['clients'] * t['requests_each']} req",
                    target,
                ]
            )
        mb_ = res["mixed_batch"]
        rows.append(
            [
                m,
                "lopsided batch: 1 × 2,200 tok + 15 × 64 tok, 1 q each",
                f"{fmt_ms(mb_['one_call_ms'])} in one call",
                "—",
                f"{fmt_ms(mb_['each_ms'])} one call each",
                "—",
                f"{mb_['x']:.2f}×",
                "",
                "3 reps (in-process)",
                f"≥1× {mark(mb_['x'] >= 1)}",
            ]
        )
        mem = res["memory"]
        mb = lambda b: f"{b / 2**20:.0f} MB"  # noqa: E731
        rows.append(
            [
                m,
                "peak RSS (server process)",
                f"{mb(mem['ours']['peak_rss'])} (batched server {mb(mem['batched']['peak_rss'])})",
                mb(mem["ts"]["peak_rss"]),
                f"bench process {mb(mem['bench_process_rss'])}",
                f"{mem['ts']['peak_rss'] / mem['ours']['peak_rss']:.2f}×",
                "",
                "",
                "",
                "",
            ]
        )
        worst = max(c["max_abs_diff"]["ours_vs_plain"] for c in res["cells"])
        worst_ts = max(c["max_abs_diff"]["ts_vs_plain"] for c in res["cells"])
        rows.append(
            [
                m,
                "max |Δ probability| vs plain forward",
                f"{worst:.1e}",
                f"{worst_ts:.1e}",
                "0 (reference)",
                "",
                "",
                "",
                "",
                "fp32: ≤ 1e-5 " + mark(worst <= 1e-5),
            ]
        )
        b = res["bf16"]
        rows.append(
            [
                m,
                "bf16 drift: max |Δ probability|, ours in bf16 vs plain fp32",
                f"{b['max_abs_diff']:.1e}",
                "",
                "0 (reference)",
                "",
                "",
                "",
                f"{b['answers']} answers, argmax {b['argmax_agree']}/{b['answers']}",
                f"bound {BF16_BOUND:g} " + mark(b["max_abs_diff"] <= BF16_BOUND),
            ]
        )
        d = res["durations"]
        rows.append(
            [
                m,
                "duration honesty: requested vs used s (CPU compute)",
                f"{d['requested_s']:.0f} s asked / {d['used_s']:.1f} s used = {d['ratio']:.1f}×",
                "",
                "",
                "",
                "",
                "",
                f"{d['calls']} calls",
                f"cut off: {d['cut_off']}/{d['calls']} " + mark(d["cut_off"] == 0),
            ]
        )
        if d.get("long_calls"):
            ok = d["long_ratio"] <= TARGET_DURATION_RATIO
            rows.append(
                [
                    m,
                    f"… of which calls over {d['long_s']:g} s of work",
                    f"{d['long_requested_s']:.0f} s asked / {d['long_used_s']:.1f} s used = "
                    f"{d['long_ratio']:.2f}× (worst call {d['long_worst']:.2f}×)",
                    "",
                    "",
                    "",
                    "",
                    "",
                    f"{d['long_calls']} calls",
                    f"≤{TARGET_DURATION_RATIO:g}× {mark(ok)}",
                ]
            )
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    line = lambda r: "| " + " | ".join(str(x).ljust(w) for x, w in zip(r, widths)) + " |"  # noqa: E731
    return "\n".join([line(head), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [line(r) for r in rows])


def machine() -> dict:
    cpu = "unknown"
    try:
        for text in Path("/proc/cpuinfo").read_text().splitlines():
            if text.startswith("model name"):
                cpu = text.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import torch
    import transformers

    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "loadavg_start": os.getloadavg(),
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a smoke run: 4 latency cells, 1 and 16 clients, few reps")
    ap.add_argument(
        "--model",
        default=None,
        help="demo, large, a model folder, or a comma list (default: demo,large; --quick: demo)",
    )
    ap.add_argument("--batch-window-ms", type=float, default=10.0, help="the batched server's window (default 10)")
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (OMP_NUM_THREADS) of every side (default 1; 0 = torch's default). On a "
        "shared 2-core machine 2 threads made a forward 3x slower and far noisier under load",
    )
    ap.add_argument("--json", help="also write the raw results here")
    args = ap.parse_args(argv)
    if args.threads:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)  # servers inherit it; this process sets it below
        import torch

        torch.set_num_threads(args.threads)
    specs = (args.model or ("demo" if args.quick else "demo,large")).split(",")
    logdir = Path(tempfile.mkdtemp(prefix="blink-bench-"))
    started = time.time()
    info = machine()
    log(f"logs in {logdir}; machine {info['nproc']} CPUs ({info['cpu']}), load {info['loadavg_start']}")
    results = [bench_model(spec, args.quick, args.batch_window_ms, logdir) for spec in specs]
    info["loadavg_end"] = os.getloadavg()
    info["wall_s"] = round(time.time() - started, 1)
    info["date"] = dt.datetime.now().astimezone().isoformat(timespec="seconds")
    larger = max(results, key=lambda r: r["params"])["model"] if len(results) > 1 else results[0]["model"]
    print(
        f"\nblink bench — {info['date']} — {'quick' if args.quick else 'full'} run, {info['wall_s']} s — "
        f"{info['nproc']} × {info['cpu']} (torch {info['torch']} {info['torch_threads']} threads, transformers "
        f"{info['transformers']}) — load avg {info['loadavg_start'][0]:.2f} → {info['loadavg_end'][0]:.2f}"
    )
    print(
        "models: "
        + "; ".join(f"{r['model']} = {r['params'] / 1e6:.0f}M params ({r['path']})" for r in results)
        + f"; batched server: --batch-window-ms {args.batch_window_ms:g} --max-batch-requests 64"
    )
    print(table(results, larger))
    for r in results:
        for why in r["restarts"]:
            print(f"note: {r['model']}: {why} (restarted; the request was sent again)")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": info, "results": results}, indent=1, default=str))


if __name__ == "__main__":
    main()
