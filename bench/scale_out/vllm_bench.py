"""blink's own engine vs blink -> vLLM (one and two replicas), on the CPU model (`make-demo-model --arch qwen3`).

    .venv/bin/python bench/scale_out/vllm_bench.py [--shape demo|large] [--quick] [--no-compile]

Every side scores the same prepared decisions (blink renders and tokenizes them once): the local side is
blink's executor in this process (its prefix-state cache on, as `serve` runs it), the vLLM sides are
`blink.vllm.VllmScorer` over real replicas started by `ci/vllm-serve.sh` (fp32, so answers can be compared;
torch.compile on unless --no-compile). Rows: median
latency of one request per cell (state tokens x questions, one client), then throughput with concurrent
clients on distinct states, and max |dp| of the vLLM answers against the local ones. The local side is measured
before the replicas start (idle vLLM CPU processes still take cycles). A markdown table on stdout.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: offline.py and the shared modules
from offline import ROOT  # first: the repository importable, the Hub off

# isort: split

import httpx
import workload


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_replicas(model_dir: Path, count: int, compile_: bool, logdir: Path) -> list[tuple[str, subprocess.Popen]]:
    subprocess.run(["bash", "ci/vllm-venv.sh"], cwd=ROOT, check=True)
    out = []
    for i in range(count):
        port = free_port()
        argv = ["bash", "ci/vllm-serve.sh", str(model_dir), str(port), "--dtype", "float32"]
        argv += [] if compile_ else ["-O0"]
        with open(logdir / f"vllm-{i}.log", "w") as fh:
            proc = subprocess.Popen(argv, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
        out.append((f"http://127.0.0.1:{port}", proc))
    deadline = time.time() + 1200
    for url, proc in out:
        while True:
            if proc.poll() is not None or time.time() > deadline:
                raise SystemExit(f"vLLM at {url} did not start: see {logdir}")
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
    return out


def stop(replicas) -> None:
    import signal

    for _, proc in replicas:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)


def local_side(engine):
    """blink's executor, as the batcher calls it; any request it could not score stops the run."""
    engine.warmup()
    return lambda plans: [scored.result() for scored in engine.score(plans)]


def scores_of(scorer):
    """The scorer's scores; any request it could not score stops the run (a dead replica must not look fast)."""

    def score(plans):
        results = scorer.score(plans)
        failed = [scored.error for scored in results if scored.error is not None]
        if failed:
            raise SystemExit(f"{len(failed)} of {len(results)} requests failed: {failed[0]}")
        return [scored.scores for scored in results]

    return score


def timed(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=("demo", "large"), default="large")
    ap.add_argument("--quick", action="store_true", help="fewer cells and repeats (~5 min)")
    ap.add_argument("--no-compile", action="store_true", help="start vLLM with -O0 (faster start, slower runs)")
    args = ap.parse_args(argv)

    from blink.decide.planner import Engine
    from blink.model.demo import make_demo_model
    from blink.model.loading import load
    from blink.vllm import Replicas, VllmScorer

    work = Path(tempfile.mkdtemp(prefix="blink-vllm-bench-"))
    model_dir = make_demo_model(work / "model", args.shape, arch="qwen3")
    engine = Engine(load(str(model_dir)))
    tokenizer = engine.tokenizer
    cells = (
        [(64, 1), (512, 8), (2000, 16)]
        if args.quick
        else [(64, 1), (64, 8), (512, 1), (512, 8), (2000, 1), (2000, 16), (2000, 64)]
    )
    repeat = 3 if args.quick else 5
    prepared = [engine.prepare(workload.body(tokenizer, "m", t, q, seed=t + q)) for t, q in cells]
    clients = 8
    bodies = [
        engine.prepare(workload.body(tokenizer, "m", 512, 8, seed=1000 + i)).prompts
        for i in range(clients * (2 if args.quick else 4))
    ]

    def measure(side: str, fn) -> tuple[list, list, float]:
        """Per cell: median ms (the cell scored once before: both prefix caches, vLLM's blocks and the
        executor's prefix states, then hold its state, as for the next request about it) and its answers;
        then decisions/s with `clients` clients on distinct states."""
        latency, answers = [], []
        for p in prepared:
            answers.append(engine.answer(p, fn([p.prompts])[0]))
            latency.append(timed(lambda f=fn, plan=[p.prompts]: f(plan), repeat) * 1000)
        log(f"{side}: " + ", ".join(f"{t} x {q} {ms:.0f} ms" for (t, q), ms in zip(cells, latency)))
        started = time.perf_counter()
        if side == "local":  # one engine: a batch at a time, as blink's batcher hands it over
            for k in range(0, len(bodies), clients):
                fn(bodies[k : k + clients])
        else:
            with ThreadPoolExecutor(clients) as pool:
                list(pool.map(lambda plan, f=fn: f([plan]), bodies))
        return latency, answers, len(bodies) / (time.perf_counter() - started)

    # the local side runs before the replicas start: idle vLLM CPU processes still take cycles from it
    results = {"local": measure("local", local_side(engine))}
    log("starting two vLLM replicas")
    started = time.perf_counter()
    replicas = start_replicas(model_dir, 2, not args.no_compile, work)
    start_s = time.perf_counter() - started
    urls = [url for url, _ in replicas]
    one, two = Replicas(urls[:1]), Replicas(urls)
    try:
        first = time.perf_counter()
        warm = engine.prepare(workload.body(tokenizer, "m", 64, 3, 99)).prompts
        sides = {"vllm x1": scores_of(VllmScorer(one)), "vllm x2": scores_of(VllmScorer(two))}
        for fn in sides.values():
            fn([warm, warm])
        first_s = time.perf_counter() - first
        for side, fn in sides.items():
            results[side] = measure(side, fn)
        health = two.health(probe=False)["replicas"]
    finally:
        stop(replicas)
    worst = max(workload.max_abs_diff(a, b) for side in sides for a, b in zip(results["local"][1], results[side][1]))
    rows = [(f"{t} tok x {q} q", {side: results[side][0][i] for side in results}) for i, (t, q) in enumerate(cells)]
    throughput = {side: results[side][2] for side in results}

    print(
        f"\n### blink vs blink -> vLLM ({args.shape} qwen3, fp32), {time.strftime('%Y-%m-%d')}, "
        f"{platform.machine()} x {os.cpu_count()} cores, torch.compile {'off' if args.no_compile else 'on'}\n"
    )
    print(f"Two replicas started side by side in {start_s:.0f} s; first requests {first_s:.1f} s.\n")
    # speed-ups: > 1 means the later column is faster (ms: earlier over later; decisions/s: later over earlier)
    print("| cell | local | vLLM x1 | vLLM x2 | x1 speed-up over local | x2 speed-up over x1 |")
    print("|---|---|---|---|---|---|")
    for label, row in rows:
        print(
            f"| {label} (ms) | {row['local']:.0f} | {row['vllm x1']:.0f} | {row['vllm x2']:.0f} | "
            f"{row['local'] / row['vllm x1']:.2f} | {row['vllm x1'] / row['vllm x2']:.2f} |"
        )
    print(
        f"| throughput, {clients} clients, 512 tok x 8 q (decisions/s) | {throughput['local']:.2f} | "
        f"{throughput['vllm x1']:.2f} | {throughput['vllm x2']:.2f} | "
        f"{throughput['vllm x1'] / throughput['local']:.2f} | {throughput['vllm x2'] / throughput['vllm x1']:.2f} |"
    )
    print(
        f"\nmax |dp| vLLM vs local: {worst:.2e}; requests per replica (x2 side): "
        + ", ".join(str(r["served"]) for r in health)
    )


if __name__ == "__main__":
    main()
