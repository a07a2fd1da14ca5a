"""The latency rows of bench/latency/run.py: its three sides (ours and `transformers serve` over HTTP, the plain forward
in-process), one cell measured rep by rep across them, and the in-process checks on the same bodies (bf16 drift,
a lopsided batch). Apart from the throughput rows and the table, which only read what this measures."""

from __future__ import annotations

import math
import statistics
import time

import httpx
import workload
from servers import Server


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
