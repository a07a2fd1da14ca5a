"""run-batch over vLLM replicas (`run-batch --engine vllm --engine-url A,C`, the flags `serve` takes): the rows are
spread across the replicas by blink's own dispatch (a chunk is not pinned to one), and a replica killed mid-run loses
no row and answers none twice; the answers equal run-batch's on blink's own engine over the same weights (the qwen3
demo) within the engines' tolerance (1e-5, as the wires through vLLM are held to in test_vllm_serve.py).

The replica killed is one of this test's own, started beside the session's two (`one_more_replica`): the tests after
this file keep both of theirs. conftest.py runs this file between test_vllm.py and test_vllm_serve.py."""

from __future__ import annotations

import json
import re
import time

import httpx
import pytest

from helpers import stop_group
from helpers.batch import QUESTIONS, read_lines, run_table, start_batch, tickets
from helpers.vllm import one_more_replica

pytestmark = [pytest.mark.timeout(1800), pytest.mark.e2e, pytest.mark.vllm, pytest.mark.slow]

ROWS, CHUNK = 240, 16
TOL = 1e-5


def served_prompts(url: str) -> float:
    """The prompts a vLLM replica has finished (its Prometheus counter, summed over its labels)."""
    text = httpx.get(url + "/metrics", timeout=30).text
    found = re.findall(r"^vllm:request_success_total\{[^}]*\} ([0-9.e+]+)$", text, re.M)
    return sum(float(x) for x in found)


def probabilities(row: dict) -> dict:
    return {k: v for k, v in row.items() if ".p." in k}


def test_run_batch_spreads_over_the_replicas_and_loses_no_row_when_one_dies(vllm_replicas, qwen3_dir, tmp_path):
    table, questions = tmp_path / "tickets.jsonl", tmp_path / "questions.json"
    table.write_text("".join(json.dumps(r) + "\n" for r in tickets(ROWS, seed=5)))
    questions.write_text(json.dumps(QUESTIONS))
    root = qwen3_dir.parent
    local = run_table(root, table, questions, tmp_path / "local.jsonl", "--quiet", model=str(qwen3_dir))
    assert local.returncode == 0, local.stderr[-3000:]
    want = {r["ticket"]: r for r in read_lines(tmp_path / "local.jsonl")}

    (kept, _), _ = vllm_replicas
    out = tmp_path / "vllm.jsonl"
    with one_more_replica(qwen3_dir, "run-batch") as (doomed, doomed_proc):
        args = ("--table", str(table), "--state-column", "text", "--questions", str(questions), "-o", str(out))
        args += ("--chunk-rows", str(CHUNK), "--quiet", "--engine", "vllm", "--engine-url", f"{kept},{doomed}")
        # the replicas' speed on a shared 2-core machine until one is measured (test_vllm_serve.py's reason)
        args += ("--engine-assumed-s-per-token", "0.1")
        run = start_batch(root, *args, model=str(qwen3_dir))
        parts = out.with_name(out.name + ".parts")
        deadline = time.time() + 900
        # two chunks written: mid-run (a chunk's part, not its stats file beside it)
        while not parts.is_dir() or len(list(parts.glob("part-*.jsonl"))) < 2:
            assert run.poll() is None, run.communicate()[1][-3000:]
            assert time.time() < deadline, "no progress"
            time.sleep(0.2)
        before_kill = served_prompts(doomed)
        written_then = len(list(parts.glob("part-*.jsonl")))
        stop_group(doomed_proc)  # the replica dies with rows in flight on it
        _, err = run.communicate(timeout=900)
    assert run.returncode == 0, err[-3000:]
    assert before_kill > 0, "the doomed replica was given no row before it died: the rows were not spread"
    assert written_then < ROWS // CHUNK, "the run had finished before the replica died"

    rows = read_lines(out)
    assert [r["ticket"] for r in rows] == [r["ticket"] for r in tickets(ROWS, seed=5)]  # every row once, in order
    assert not any(r.get("blink.error") for r in rows), [r["blink.error"] for r in rows if r.get("blink.error")][:3]
    worst = 0.0
    for row in rows:
        got, expected = probabilities(row), probabilities(want[row["ticket"]])
        assert set(got) == set(expected)
        worst = max(worst, *(abs(got[k] - expected[k]) for k in got))
    assert worst < TOL, worst
