"""run-batch, nothing lost and nothing twice: a run SIGKILLed about half way, then stopped by SIGTERM, then run
again with the same arguments holds every input row exactly once, in order, with the answers of a run never
interrupted (within 1e-6); a rerun with other questions is refused naming them, and a finished run is not run again."""

from __future__ import annotations

import json
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

    finished = run_batch(demo_root, *args_for(folder, out))
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert "written before" in finished.stderr
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
