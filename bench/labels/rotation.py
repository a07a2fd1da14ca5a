"""The extra cost of `"x_order": "rotate"`: a choice read once per cyclic rotation of its options.

    .venv/bin/python bench/labels/rotation.py [--model demo|large|PATH] [--reps N] [--threads N]

In-process, no HTTP: the model call only (`Engine.score`), on the same prepared requests for every side.
Per cell (a state of S tokens, one choice of k options plus a noul and a score question), three sides, alternating
rep by rep so they share the machine's noise:

- **fixed**: the request as given (3 question prompts on one shared state);
- **rotate**: `x_order: "rotate"`: k - 1 more question prompts on the same state, so only suffix rows are added;
- **client re-ask**: what a client doing it itself pays: k requests, one per rotation, each in its own model call
  (each prefills the state again).

Printed: median ms per side, rotate ÷ fixed, re-ask ÷ rotate (> 1: rotating in the server is cheaper), and the
tokens the executor runs (the state counted once), which show that the added work is the suffixes only.
"""

from __future__ import annotations

import argparse
import copy
import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: offline.py and the shared modules
import offline  # noqa: F401 - first: the repository importable, the Hub off

# isort: split

import workload

OPTIONS = {
    "billing": "Charges, refunds and invoices",
    "shipping": "Late, lost or damaged parcels",
    "technical": "Devices, network and accounts",
    "returns": "Items sent back",
    "sales": "New orders",
    "security": "Fraud and account takeovers",
    "legal": "Contracts and complaints to authorities",
    "other": "Anything else",
}
CELLS = [(64, 4), (512, 4), (512, 8), (2000, 4), (2000, 8)]


def request(tokenizer, state_tokens: int, options: int, seed: int) -> dict:
    return {
        "state": workload.text_of_tokens(tokenizer, state_tokens, seed),
        "questions": {
            "team": {
                "type": "choice",
                "instructions": "Which team should handle this ticket?",
                "criteria": dict(list(OPTIONS.items())[:options]),
            },
            "urgent": {"type": "noul", "instructions": "Does this need a reply today?"},
            "anger": {
                "type": "score",
                "instructions": "How upset is the customer?",
                "criteria": ["Calm", "Annoyed", "Angry", "Furious"],
            },
        },
    }


def rotations(body: dict) -> list[dict]:
    options = list(body["questions"]["team"]["criteria"].items())
    out = []
    for shift in range(len(options)):
        r = copy.deepcopy(body)
        r["questions"]["team"]["criteria"] = dict(options[shift:] + options[:shift])
        out.append(r)
    return out


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="demo", help="demo, large or a model folder")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    args = ap.parse_args(argv)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from blink.decide.planner import Engine
    from blink.model.loading import load

    if args.model in ("demo", "large"):
        from blink.model.demo import demo_model_dir

        path = demo_model_dir(args.model)
    else:
        path = Path(args.model)
    engine = Engine(load(str(path)))
    started = datetime.now(UTC)
    print(
        f"blink rotation bench — {started.isoformat(timespec='seconds')} — model {args.model} ({path}) — "
        f"{os.cpu_count()} CPUs {platform.processor() or platform.machine()} — torch {torch.__version__} "
        f"{torch.get_num_threads()} threads — load avg {os.getloadavg()[0]:.2f}"
    )
    print("| cell | fixed | rotate | client re-ask | rotate ÷ fixed | re-ask ÷ rotate | tokens fixed → rotate |")
    print("|---|---|---|---|---|---|---|")
    for state_tokens, k in CELLS:
        body = request(engine.tokenizer, state_tokens, k, seed=state_tokens + k)
        fixed = engine.prepare(body)
        rotate = engine.prepare({**body, "x_order": "rotate"})
        reask = [engine.prepare(r) for r in rotations(body)]
        sides = {
            "fixed": lambda: engine.score([fixed.prompts]),
            "rotate": lambda: engine.score([rotate.prompts]),
            "reask": lambda: [engine.score([r.prompts]) for r in reask],
        }
        for fn in sides.values():  # warm-up
            fn()
        ms = {name: [] for name in sides}
        for _ in range(args.reps):
            for name, fn in sides.items():
                ms[name].append(timed(fn))
        med = {name: statistics.median(v) for name, v in ms.items()}
        print(
            f"| {state_tokens} tok, choice of {k} | {med['fixed']:.1f} ms | {med['rotate']:.1f} ms | "
            f"{med['reask']:.1f} ms | {med['rotate'] / med['fixed']:.2f}× | {med['reask'] / med['rotate']:.2f}× | "
            f"{fixed.input_tokens} → {rotate.input_tokens} |",
            flush=True,
        )
    print(f"load avg at the end {os.getloadavg()[0]:.2f}; {args.reps} reps per side, medians")


if __name__ == "__main__":
    main()
