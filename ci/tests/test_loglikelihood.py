"""lm-eval 0.4.13's `local-completions` against the standalone server, as people compare served models on
multiple-choice benchmarks: a small local task (written here; the Hub is unreachable) scored through blink's
`/v1/completions` (`echo`, `logprobs`, `max_tokens: 1`, prompts as lists of token-id lists, four to a request or one,
and lm-eval's remote tokenizer on `/tokenizer_info` and `/tokenize`), and by lm-eval's own `hf` backend on the same
demo model folder at batch size 1 in float32: the same loglikelihood per choice (<= 1e-4) and the same accuracy.
Every question follows one instruction of a few blocks, so prompts sent one a request share their starts through the
prefix-state cache (scoring_prefixes.py).

lm-eval lives in its own venv (.venv-lmeval, built by ci/lmeval-venv.sh when missing).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

# pytest-timeout's 600 s counts a test's fixtures too: the first test carries the module's lm-eval `hf` run and the
# server's start (541 s of set-up on 2 cores at load 6-12, 2026-12-07) before its own lm-eval run; each run is
# bounded at 900 s (`evaluate`), so two of them and a start fit in 1800 s
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-lmeval"

QUESTIONS = [
    ("The capital of France is", ["Paris", "Berlin", "Madrid", "Rome"], 0),
    ("Two plus two equals", ["four", "five", "three", "ten"], 0),
    ("The color of the sky on a clear day is", ["green", "blue", "red", "black"], 1),
    ("Water freezes at zero degrees", ["Celsius", "Kelvin", "Fahrenheit and more words after it", "nothing"], 0),
    ("A cat says", ["woof", "meow", "moo", "a long sentence about the sound of cats at night"], 1),
    ("The largest planet in the solar system is", ["Jupiter", "Mars", "Earth", "Venus"], 0),
]
INSTRUCTION = (
    "Read the question below with care, think about what each of the given choices would mean if it were true, "
    "and then answer with the one choice that a careful reader who knows the world well would pick. Some questions "
    "are about science, some about animals, some about numbers; none of them is a trick. "
)

TASK = """task: blink_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{instruction}}}}Question: {{{{question}}}}\\nAnswer:"
doc_to_target: label
doc_to_choice: choices
metric_list:
  - metric: acc
"""


@pytest.fixture(scope="module")
def lm_eval() -> Path:
    if not (VENV / ".ready").exists():
        subprocess.run(["bash", str(ROOT / "ci" / "lmeval-venv.sh")], check=True, timeout=1800)
    return VENV / "bin" / "lm_eval"


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("lmeval-task")
    data = folder / "data.jsonl"
    data.write_text(
        "".join(
            json.dumps({"instruction": INSTRUCTION, "question": q, "choices": c, "label": a}) + "\n"
            for q, c, a in QUESTIONS
        )
    )
    (folder / "blink_mc.yaml").write_text(TASK.format(data=data))
    return folder


def evaluate(lm_eval: Path, task_dir: Path, out: Path, model: str, model_args: str, batch_size: int) -> tuple:
    """Run the task; (accuracy, {doc id: [loglikelihood per choice]}, lm-eval's log)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env["HF_DATASETS_CACHE"] = str(out / "datasets")
    argv = [str(lm_eval), "--model", model, "--model_args", model_args, "--include_path", str(task_dir)]
    argv += ["--tasks", "blink_mc", "--batch_size", str(batch_size), "--log_samples", "--output_path", str(out)]
    run = subprocess.run(argv + ["--device", "cpu"], env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-4000:]
    [results] = out.rglob("results_*.json")
    [samples] = out.rglob("samples_blink_mc_*.jsonl")
    acc = json.loads(results.read_text())["results"]["blink_mc"]["acc,none"]
    rows = [json.loads(line) for line in samples.read_text().splitlines()]
    return acc, {r["doc_id"]: [float(resp[0][0]) for resp in r["resps"]] for r in rows}, run.stderr


@pytest.fixture(scope="module")
def hf_results(lm_eval, task_dir, demo_dir, tmp_path_factory) -> tuple:
    """lm-eval's own `hf` backend on the demo model folder, batch size 1, float32: (accuracy, loglikelihoods)."""
    out = tmp_path_factory.mktemp("hf")
    acc, local, _ = evaluate(lm_eval, task_dir, out, "hf", f"pretrained={demo_dir},dtype=float32", 1)
    return acc, local


@pytest.mark.parametrize("batch_size", [1, 4])
def test_local_completions_equal_lm_evals_own_hf_backend(lm_eval, task_dir, server, hf_results, tmp_path, batch_size):
    """Four prompts to a request (an item's choices share their context in one pass) or one (they share it through
    the prefix-state cache: the server's health counts the resumed prompts): the same answers as `hf`."""
    import httpx

    hits = httpx.get(f"{server}/healthz").json()["prefix_cache"]["hits"]
    remote_args = f"model=demo,base_url={server}/v1/completions,num_concurrent=1,max_retries=1"
    acc, served, log = evaluate(lm_eval, task_dir, tmp_path, "local-completions", remote_args, batch_size)
    assert "Auto-detected remote tokenizer support" in log  # /tokenizer_info and /tokenize answered as vLLM's
    hf_acc, local = hf_results
    assert sorted(served) == sorted(local) == list(range(len(QUESTIONS)))
    worst = max(abs(a - b) for doc in local for a, b in zip(served[doc], local[doc]))
    assert worst <= 1e-4, worst
    assert all(len(served[doc]) == 4 for doc in served)
    assert acc == hf_acc
    if batch_size == 1:  # every prompt after the first starts with the instruction's saved blocks at least
        assert httpx.get(f"{server}/healthz").json()["prefix_cache"]["hits"] - hits >= 4 * len(QUESTIONS) - 1
