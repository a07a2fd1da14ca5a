"""run-batch as its users run it: the command in its own process, its inputs written here, its outputs compared with
what the server answers to the same requests (ci/tests/test_run_batch.py, test_run_batch_resume.py)."""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
from pathlib import Path

from helpers.servers import server_env

# what differs between two answers to the same request: fresh ids and timestamps
VOLATILE = {"id", "created", "created_at", "request_id"}
QUESTIONS = {
    "refund": {"type": "noul", "instructions": "Is the customer asking for money back?"},
    "team": {"type": "choice", "instructions": "Which team?", "criteria": {"billing": "Charges", "technical": None}},
    "anger": {"type": "score", "instructions": "How frustrated?", "criteria": ["Calm", "Frustrated", "Very angry"]},
}
# the columns a table gets for QUESTIONS, after its own
ANSWER_COLUMNS = [
    "blink.refund",
    "blink.team",
    "blink.team.p.billing",
    "blink.team.p.technical",
    "blink.anger",
    "blink.anger.p.0",  # a score's levels by their number, as the API's score counts them
    "blink.anger.p.1",
    "blink.anger.p.2",
    "blink.error",
]
WORDS = "charged twice refund router blinks password reset account locked parcel late crushed invoice angry".split()


def run_batch(demo_root: Path, *args: str, timeout: float = 600, model: str = "demo") -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "blink", "run-batch", "--model", model, *args]
    return subprocess.run(argv, capture_output=True, text=True, env=server_env(demo_root), timeout=timeout)


def run_table(
    demo_root: Path, table: Path, questions: Path, out: Path, *args: str, column: str = "text", model: str = "demo"
):
    """run-batch over a table: the column `column` is the state, `questions` the file of questions."""
    table_args = ("--table", str(table), "--state-column", column, "--questions", str(questions), "-o", str(out))
    return run_batch(demo_root, *table_args, *args, model=model)


def start_batch(demo_root: Path, *args: str, model: str = "demo") -> subprocess.Popen:
    argv = [sys.executable, "-m", "blink", "run-batch", "--model", model, *args]
    env = server_env(demo_root)
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def tickets(n: int, seed: int = 0) -> list[dict]:
    """Rows of a support-ticket table: an id, a text of ~40 words, a cell a spreadsheet would run as a formula."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 40)))
        rows.append({"ticket": f"T{i:04d}", "text": f"Ticket {i}: {text}", "note": "=1+1" if i % 7 == 0 else "ok"})
    return rows


def close(a, b, where: str = "body", tol: float = 1e-6) -> None:
    """`a` and `b` the same JSON but for fresh ids and timestamps, numbers within `tol`."""
    if isinstance(a, dict) and isinstance(b, dict):
        assert set(a) == set(b), f"{where}: keys {sorted(set(a) ^ set(b))} differ"
        for key in a:
            if key not in VOLATILE:
                close(a[key], b[key], f"{where}.{key}", tol)
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), f"{where}: {len(a)} items against {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            close(x, y, f"{where}[{i}]", tol)
    elif isinstance(a, float | int) and isinstance(b, float | int) and not isinstance(a, bool):
        assert abs(a - b) <= tol, f"{where}: {a} against {b}"
    else:
        assert a == b, f"{where}: {a!r} against {b!r}"


def read_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def refusal(*argv: str) -> str:
    """What run-batch refuses before the model loads, asked in this process: its own parser and Plan, as
    `python -m blink run-batch` builds them (test_run_batch proves the command's exit status and stderr once)."""
    import pytest

    from blink.errors import StartupError
    from blink.run_batch.command import Plan, add_arguments
    from blink.settings import Settings
    from blink.settings_flags import from_args

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(list(argv))
    with pytest.raises(StartupError) as refused:
        Plan(args, from_args(args, Settings))
    return str(refused.value)
