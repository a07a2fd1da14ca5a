"""Content-free prior normalization (`x_calibration: "prior"`, blink.decide.prior) on a demo model biased on purpose.

    .venv/bin/python bench/labels/prior.py [--demo-dir DIR] [--lines N] [--reps N] [--bias NATS]

In-process, no HTTP. Two figures:

- **accuracy** on a synthetic labelled set: N seeded word-soup states, one choice question of 4 teams, on a copy of
  the demo model with `--bias` nats added to the `billing` label's LM-head row (ci/tests/biased_demo.py). The label
  of each line is the unbiased demo model's own answer with its prior taken out (its prior-normalized argmax): what
  the state says beyond the label prior. Printed: accuracy, NLL and ECE of the biased model raw and with the prior
  (the same numbers `python -m blink calibrate` prints), and the unbiased model raw for reference.
- **cost of a repeated question**: the same questions about a new state each rep (so no state is in the prefix-state
  cache), prepared, scored and answered, with `x_calibration` "raw" and "prior" alternating rep by rep; the prior's
  content-free prompts were scored once before, so "prior" runs no extra pass. Printed: the medians and their ratio.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: offline.py and the shared modules
import offline  # noqa: F401 - first: the repository importable, the Hub off

# isort: split

WORDS = (
    "parcel refund invoice courier screen battery router login charge warranty locker voucher outage charger "
    "signature deposit neighbour statement escalation apology delivery password card tracking"
).split()


def state(i: int) -> str:
    rng = random.Random(i)
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(12, 30))).capitalize() + "."


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--demo-dir", default=None, help="the demo model folder (default: build or find it)")
    parser.add_argument("--lines", type=int, default=40)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--bias", type=float, default=3.0)
    args = parser.parse_args()

    import torch
    from biased_demo import QUESTION, TEAMS, biased_copy

    from blink.decide.calibrate_command import examples_of
    from blink.decide.calibration import metrics
    from blink.decide.planner import Engine
    from blink.model.demo import demo_model_dir
    from blink.model.loading import load

    torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))
    demo = Path(args.demo_dir) if args.demo_dir else Path(demo_model_dir())
    folder = Path(tempfile.mkdtemp(prefix="blink-biased-"))
    info = biased_copy(demo, folder / "biased", option="billing", bias=args.bias)
    clean, biased = Engine(load(str(demo))), Engine(load(str(folder / "biased")))
    states = clean.prior_states

    # accuracy ---------------------------------------------------------------------------------------------------
    options = list(TEAMS)
    labelled = []
    for i in range(args.lines):
        answer = clean.decide({"state": state(i), "questions": {"team": QUESTION}, "x_calibration": "prior"})
        probs = answer["team"]["probabilities"]
        labelled.append((state(i), options.index(max(probs, key=probs.get))))

    def examples(engine):
        out = []
        for text, label in labelled:
            prepared = engine.prepare({"state": text, "questions": {"team": QUESTION}})
            prepared.prior = engine.plan_prior(prepared.decision, False)
            scored, *prior = engine.score([prepared.prompts, *prepared.prior_plans])
            prepared.prior.fill(prior, engine.priors)
            out += [e for _, e in examples_of(prepared, {"team": label}, scored.result(), prepared.prior.logits())]
        return out

    biased_examples, clean_examples = examples(biased), examples(clean)
    rows = {
        "biased, raw": metrics(biased_examples, 1.0),
        "biased, prior": metrics(biased_examples, 1.0, prior=True),
        "unbiased, raw": metrics(clean_examples, 1.0),
    }
    counts = {o: sum(label == i for _, label in labelled) for i, o in enumerate(options)}
    print(f"biased demo: +{info['bias']} nats on {info['option']!r} (token {info['label_id']}); states {states}")
    print(f"{args.lines} labelled lines, labels by option: {counts}")
    print(f"{'model, x_calibration':<22}{'accuracy':>10}{'NLL':>10}{'ECE':>10}")
    for name, m in rows.items():
        print(f"{name:<22}{m['accuracy']:>10.4f}{m['nll']:>10.4f}{m['ece']:>10.4f}")

    # cost of a repeated question --------------------------------------------------------------------------------
    questions = {
        "team": QUESTION,
        "urgent": {"type": "noul", "instructions": "Does this need a reply today?"},
        "anger": {"type": "score", "instructions": "How upset?", "criteria": ["Calm", "Annoyed", "Angry"]},
    }

    def decide(text: str, mode: str) -> float:
        t = time.perf_counter()
        biased.decide({"state": text, "questions": questions, "x_calibration": mode})
        return time.perf_counter() - t

    decide("warm-up state", "prior")  # the prior of these questions is scored (once) here
    times = {"raw": [], "prior": []}
    for rep in range(args.reps):
        for mode in ("raw", "prior") if rep % 2 == 0 else ("prior", "raw"):
            times[mode].append(decide(f"{state(1000 + rep)} ({mode})", mode))
    raw_ms, prior_ms = (statistics.median(times[m]) * 1000 for m in ("raw", "prior"))
    print(
        f"repeated question, new state each rep ({args.reps} reps): raw {raw_ms:.2f} ms, prior {prior_ms:.2f} ms, "
        f"prior / raw = {prior_ms / raw_ms:.3f}"
    )
    print(f"prior cache: {biased.priors.stats()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
