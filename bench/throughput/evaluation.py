"""What evaluating a labelled table adds to labelling it: run-batch over the same rows with `--label`, in one run.

    .venv/bin/python bench/throughput/evaluation.py [--model demo] [--rows 2000] [--state-tokens 60] [--reps 3]

The rows: `--rows` support-ticket states of ~`--state-tokens` tokens (bench/workload.py), asked three questions
(noul, choice of 4, score of 3-5), with a label column per question drawn at random, as a CSV (the format people
bring; the slowest to read back). Each rep runs `python -m blink run-batch --table ... --label ...` as its users run
it, on a fresh output, and reads from what it wrote:

- **labelling**: the rows decided and written, model loading excluded (the sidecar's `summary.seconds`);
- **evaluation**: the report made after it, the labelled table read back and every figure of every question,
  bootstrap intervals, the certificate and the 5-fold fit included (the report's own `seconds`), and the JSON and
  HTML written.

The ratio (labelling + evaluation) / labelling is what an evaluation costs against run-batch on the same rows (the
target: at most 1.05). The load average is printed before and after: these machines are shared.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: offline.py and the shared modules
import offline  # noqa: F401 - first: the repository importable, the Hub off

# isort: split

import workload
from latency.floor import load_average
from servers import DEMO_ROOT

from helpers import server_env


def write_table(tokenizer, folder: Path, rows: int, state_tokens: int) -> tuple[Path, Path, dict]:
    questions = workload.questions(3)
    table, asked = folder / "rows.csv", folder / "questions.json"
    rng = random.Random(0)
    options = {qid: labels_of(q) for qid, q in questions.items()}
    with open(table, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["row", "text", *(f"{qid}_truth" for qid in questions)])
        for i in range(rows):
            text = workload.text_of_tokens(tokenizer, state_tokens, seed=i)
            writer.writerow([i, text, *(rng.choice(options[qid]) for qid in questions)])
    asked.write_text(json.dumps(questions), encoding="utf-8")
    return table, asked, questions


def labels_of(question: dict) -> list[str]:
    """The labels a person would write for a question: yes/no, a choice's option ids, a score's level indices."""
    if question["type"] == "noul":
        return ["yes", "no"]
    if question["type"] == "choice":
        return list(question["criteria"])
    return [str(i) for i in range(len(question["criteria"]))]


def run(model: str, table: Path, asked: Path, questions: dict, folder: Path) -> dict:
    out = folder / "out.csv"
    argv = [sys.executable, "-m", "blink", "run-batch", "--model", model, "--table", str(table)]
    argv += ["--state-column", "text", "--questions", str(asked), "-o", str(out), "--quiet", "--overwrite"]
    for qid in questions:
        argv += ["--label", f"{qid}={qid}_truth"]
    done = subprocess.run(argv, capture_output=True, text=True, env=server_env(DEMO_ROOT))
    if done.returncode:
        raise SystemExit(f"run-batch failed:\n{done.stderr[-3000:]}")
    labelling = json.loads(Path(str(out) + ".blink.json").read_text())["summary"]["seconds"]
    report = json.loads((folder / "out.report.json").read_text())
    assert all(r["n"] for r in report["questions"].values()), "a question with no row counted"
    return {"labelling": labelling, "evaluation": report["seconds"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="demo")
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--state-tokens", type=int, default=60)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    from blink.model.loading import load

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        tokenizer = load(args.model, weights=False).tokenizer
        table, asked, questions = write_table(tokenizer, folder, args.rows, args.state_tokens)
        print(f"load average before: {load_average()}")
        reps = [run(args.model, table, asked, questions, folder) for _ in range(args.reps)]
        print(f"load average after:  {load_average()}")
    print(f"\n{args.rows} rows, 3 questions, model {args.model}, {args.reps} reps (median; each rep's ratio)")
    print(f"{'labelling s':>12}{'evaluation s':>14}{'ratio':>8}")
    ratios = [(r["labelling"] + r["evaluation"]) / r["labelling"] for r in reps]
    for r, ratio in zip(reps, ratios):
        print(f"{r['labelling']:>12.2f}{r['evaluation']:>14.3f}{ratio:>8.3f}")
    print(f"median ratio {statistics.median(ratios):.3f} (target <= 1.05)")


if __name__ == "__main__":
    main()
