"""What serving a task adds to a decision, and what its drift monitor costs per answer, in one run.

    .venv/bin/python bench/latency/task.py [--model demo] [--reps 200]

- **a task's decision**: the same System One request (a new ~64-token state each time, three questions: noul, choice,
  score) with and without `x_task`, in alternating order, through one app in this process (blink.server.create_app
  over one engine, Starlette's TestClient: no network in the figure). The task holds the heaviest fit (vector
  scaling on every question) and a monitor per question. Medians of the whole request; the ratio with / without is
  what a task adds (the target: at most 1.02).
- **the monitor**: microseconds per answer over its first 10,000 answers and over answers 100,000-110,000 (O(1): the
  two should match).
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

import numpy as np
import orjson
import workload
from latency.floor import load_average
from starlette.testclient import TestClient

QUESTIONS = {
    "refund": {"type": "noul", "instructions": "Is the customer asking for money back?"},
    "team": {"type": "choice", "instructions": "Which team?", "criteria": {"billing": None, "technical": None}},
    "anger": {"type": "score", "instructions": "How frustrated?", "criteria": ["Calm", "Frustrated", "Very angry"]},
}
OPTIONS = {"refund": ["true", "false"], "team": ["billing", "technical"], "anger": ["0", "1", "2"]}


def task_file(folder: Path, weights: str, served: dict) -> Path:
    """A task with vector scaling on every question (the heaviest fit to apply), bound to these weights."""
    from blink.tasks.drift import baseline
    from blink.tasks.task_file import make

    rng = np.random.default_rng(0)
    report = {"questions": {}}
    for qid, options in OPTIONS.items():
        p = rng.dirichlet(np.ones(len(options)), 400)
        fit = {"kept": "vector", "params": {"temperature": 0.8, "bias": [0.1] + [0.0] * (len(options) - 1)}}
        certificate = {**fit, "threshold": 0.6, "alpha": 0.05, "delta": 0.05, "baseline": baseline(p)}
        kind = QUESTIONS[qid]["type"]
        report["questions"][qid] = {"type": kind, "options": options, "fitted": {"certificate": certificate}}
    facts = {"weights": weights, "calibration": served["calibration"], "answers": served["answers"]}
    path = folder / "bench.task.json"
    path.write_bytes(orjson.dumps(make("bench", QUESTIONS, report, facts)))
    return path


def monitor_cost() -> tuple[float, float]:
    from blink.tasks.drift import Monitor

    monitor = Monitor({"rows": 1000, "mix": [0.5, 0.3, 0.2], "low_confidence": 0.6})
    rng = np.random.default_rng(1)
    options, confidence = rng.integers(0, 3, 110_000).tolist(), rng.random(110_000).tolist()
    costs = []
    for start, stop in ((0, 10_000), (10_000, 100_000), (100_000, 110_000)):
        t = time.perf_counter()
        for o, c in zip(options[start:stop], confidence[start:stop], strict=True):
            monitor.add(o, c)
        costs.append((time.perf_counter() - t) / (stop - start) * 1e6)
    return costs[0], costs[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="demo")
    parser.add_argument("--reps", type=int, default=200)
    args = parser.parse_args()
    from blink.decide.calibration import weights_fingerprint
    from blink.server import build_context, create_app, load_served
    from blink.settings import Settings
    from blink.tasks.task_file import served_as

    print(f"load average before: {load_average()}", flush=True)
    settings = Settings(model=args.model)
    served = load_served(settings)
    planner = served.planner
    answers = {"x_order": planner.order, "x_calibration": planner.x_calibration, "prior_states": planner.prior_states}
    with tempfile.TemporaryDirectory() as folder:
        weights = weights_fingerprint(served.loaded.root)
        path = task_file(Path(folder), weights, served_as(planner.calibration.health(), answers))
        ctx = build_context(Settings(model=args.model, tasks=(str(path),)), served)
        states = [workload.text_of_tokens(planner.tokenizer, 64, seed) for seed in range(2 * args.reps + 10)]
        times: dict[str, list[float]] = {"plain": [], "task": []}
        with TestClient(create_app(ctx)) as client:
            for i, state in enumerate(states):
                side = "task" if i % 2 else "plain"
                body = (
                    {"state": state, "x_task": "bench"} if side == "task" else {"state": state, "questions": QUESTIONS}
                )
                t = time.perf_counter()
                answered = client.post("/v1/systemone", json=body)
                elapsed = time.perf_counter() - t
                assert answered.status_code == 200, answered.text[:300]
                if i >= 10:  # the first few warm the caches
                    times[side].append(elapsed)
    plain, task = statistics.median(times["plain"]), statistics.median(times["task"])
    print(
        f"decision, median of {len(times['plain'])} each: plain {plain * 1e3:.2f} ms, with x_task {task * 1e3:.2f} ms"
    )
    print(f"ratio task / plain: {task / plain:.3f} (target <= 1.02)")
    early, late = monitor_cost()
    print(
        f"monitor: {early:.1f} us per answer over its first 10,000 answers, {late:.1f} us over 100,000-110,000 "
        f"({late / early:.2f}x)"
    )
    print(f"load average after: {load_average()}", flush=True)


if __name__ == "__main__":
    main()
