"""run-batch, nothing lost and nothing twice: a run SIGKILLed about half way, then stopped by SIGTERM, then run
again with the same arguments holds every input row exactly once, in order, with the answers of a run never
interrupted (within 1e-6); a rerun with other questions is refused naming them, and a finished run is not run again."""

from __future__ import annotations

import itertools
import json
import re
import signal
import time

import pytest

from helpers.batch import QUESTIONS, close, read_lines, run_batch, start_batch, tickets

pytestmark = pytest.mark.e2e

ROWS, CHUNK = 480, 16
CHUNKS = ROWS // CHUNK


def parts_written(out) -> list:
    folder = out.with_name(out.name + ".parts")
    return sorted(folder.glob("part-*.jsonl")) if folder.is_dir() else []


def stop_when(proc, out, parts: int, sig: int, timeout: float = 300) -> None:
    """Send `sig` once `parts` parts are written (the run not finished yet)."""
    deadline = time.time() + timeout
    while len(parts_written(out)) < parts:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.time() < deadline, "no progress"
        time.sleep(0.02)
    proc.send_signal(sig)


def said_first(stderr: str, words: str) -> bool:
    """`words` said on a line of their own before any line of run-batch's progress (the model's loading may be)."""
    ours = [line for line in stderr.splitlines() if line.startswith("run-batch")]
    return bool(ours) and ours[0] == words + "; deciding the rest"


@pytest.fixture(scope="module")
def table(tmp_path_factory, demo_root):
    folder = tmp_path_factory.mktemp("run-batch-resume")
    (folder / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in tickets(ROWS, seed=1)), encoding="utf-8")
    (folder / "q.json").write_text(json.dumps(QUESTIONS), encoding="utf-8")
    clean = folder / "clean.jsonl"
    done = run_batch(demo_root, *args_for(folder, clean))
    assert done.returncode == 0, done.stderr[-3000:]
    return folder, read_lines(clean)


def args_for(folder, out, questions: str = "q.json") -> tuple:
    table, asked = str(folder / "t.jsonl"), str(folder / questions)
    return (
        "--table",
        table,
        "--state-column",
        "text",
        "--questions",
        asked,
        "-o",
        str(out),
        "--chunk-rows",
        str(CHUNK),
    )


def test_killed_then_stopped_then_finished_holds_every_row_once(table, demo_root):
    folder, clean = table
    out = folder / "out.jsonl"
    killed = start_batch(demo_root, *args_for(folder, out))
    stop_when(killed, out, CHUNKS // 2, signal.SIGKILL)
    killed.wait(60)
    assert killed.returncode == -signal.SIGKILL and not out.exists()
    kept = len(parts_written(out))
    assert CHUNKS // 2 <= kept < CHUNKS

    stopped = start_batch(demo_root, *args_for(folder, out))
    stop_when(stopped, out, kept + 1, signal.SIGTERM)
    _, err = stopped.communicate(timeout=120)
    assert stopped.returncode == 3, err[-3000:]  # stopped cleanly, resumable
    assert "stopped" in err and not out.exists()
    for part in parts_written(out):  # every part whole
        assert len(read_lines(part)) == CHUNK

    before = len(parts_written(out)) * CHUNK
    finished = run_batch(demo_root, *args_for(folder, out))
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert said_first(finished.stderr, f"run-batch: resuming {out}: {before} rows already written")
    assert f"({before} written before)" in finished.stderr
    rows = read_lines(out)
    assert [r["ticket"] for r in rows] == [r["ticket"] for r in clean]  # every row once, in order
    for got, want in zip(rows, clean):
        close(got, want, got["ticket"])
    assert not out.with_name(out.name + ".parts").exists()
    side = json.loads(out.with_name(out.name + ".blink.json").read_text())
    assert side["complete"] and side["summary"]["rows"] == ROWS and side["summary"]["errors"] == 0

    again = run_batch(demo_root, *args_for(folder, out))
    assert again.returncode == 0 and "complete already" in again.stdout
    assert read_lines(out) == rows


def test_a_rerun_with_other_questions_is_refused(table, demo_root):
    folder, _ = table
    out = folder / "other.jsonl"
    killed = start_batch(demo_root, *args_for(folder, out))
    stop_when(killed, out, 2, signal.SIGKILL)
    killed.wait(60)
    other = {**QUESTIONS, "urgent": {"type": "noul", "instructions": "Is it urgent?"}}
    (folder / "q2.json").write_text(json.dumps(other), encoding="utf-8")
    refused = run_batch(demo_root, *args_for(folder, out, "q2.json"))
    assert refused.returncode == 1
    assert 'questions.urgent: "(absent)" then' in refused.stderr and "other settings" in refused.stderr
    assert parts_written(out), "the refusal leaves what was written"


def test_progress_moves_as_rows_are_answered_and_an_early_kill_keeps_the_first_chunks(tmp_path, demo_root):
    """The default chunks (16, 32, 64, … rows up to 256): a run killed once ~60 rows are answered keeps its first
    chunks whole; plain progress lines (stderr not a terminal) come every --progress-every seconds and count rows as
    they are answered; the rerun says at its start what it resumes. (More rows than either run decides: a fast
    machine is still running when it is killed; every row once after a kill is the test above.)"""
    from blink.run_batch.journal import chunk_sizes

    rows = 2000
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in tickets(rows, seed=2)), encoding="utf-8")
    (tmp_path / "q.json").write_text(json.dumps(QUESTIONS), encoding="utf-8")
    out = tmp_path / "out.jsonl"
    args = ("--table", str(tmp_path / "t.jsonl"), "--state-column", "text", "--questions", str(tmp_path / "q.json"))
    args += ("-o", str(out), "--progress-every", "0.2")
    run = start_batch(demo_root, *args)
    counts, deadline = [], time.time() + 300
    while not counts or counts[-1] < 60 or not parts_written(out):  # the first chunk, 16 rows, written
        line = run.stderr.readline()
        assert line and time.time() < deadline, "no progress line"
        if found := re.match(r"run-batch: (\d+)/2000 rows", line):
            counts.append(int(found[1]))
    run.kill()
    run.wait(60)
    assert counts == sorted(counts) and len(counts) >= 2, counts  # lines while it runs, never going back
    kept = sum(len(read_lines(part)) for part in parts_written(out))
    bounds = list(itertools.accumulate(itertools.islice(chunk_sizes(256), 12)))
    assert kept in bounds, (kept, bounds[:6])  # whole chunks: 16, then 32 more, 64 more, …

    again = start_batch(demo_root, *args)
    try:
        said = [again.stderr.readline() for _ in range(40)]  # the model's loading, then run-batch's first line
        ours = [line.strip() for line in said if line.startswith("run-batch")]
        assert ours and ours[0] == f"run-batch: resuming {out}: {kept} rows already written; deciding the rest", said
    finally:
        again.kill()
        again.wait(60)
