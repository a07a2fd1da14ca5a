"""blink on Ray Data, on a local Ray cluster this module starts (loopback, no dashboard, 4 logical CPUs: the two
actors take one each and leave Ray Data's reader room): `Decider` over a Ray dataset gives, row by row, run-batch's
answers on one machine (within 1e-6); `run-batch --ray` with one of its two actors killed mid-run, and a driver
(one actor) SIGKILLed mid-run then started again, both leave every row in the output exactly once with those answers."""

from __future__ import annotations

import json
import signal
import time

import pytest

from helpers.batch import QUESTIONS, close, read_lines, run_table, start_batch, tickets
from helpers.servers import server_env

pytestmark = [pytest.mark.e2e, pytest.mark.ray]

ROWS, CHUNK = 96, 8
ANSWER = "blink."


@pytest.fixture(scope="module")
def table(tmp_path_factory, demo_root):
    """The table, its questions, and run-batch's output on one machine."""
    folder = tmp_path_factory.mktemp("run-batch-ray")
    rows = tickets(ROWS, seed=3)
    rows[5]["text"] = None  # a row with no state: an error row, not a failed job
    (folder / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (folder / "q.json").write_text(json.dumps(QUESTIONS), encoding="utf-8")
    one = folder / "one.jsonl"
    done = run_table(demo_root, folder / "t.jsonl", folder / "q.json", one, "--chunk-rows", str(CHUNK))
    assert done.returncode == 0, done.stderr[-3000:]
    return folder, read_lines(one)


@pytest.fixture(scope="module")
def cluster(demo_root):
    """A Ray cluster in this process, on loopback; its address for run-batch's drivers."""
    from blink.run_batch.ray_run import loopback

    loopback("local")
    import ray

    ray.init(
        num_cpus=4,
        include_dashboard=False,
        object_store_memory=128 << 20,
        log_to_driver=False,
        runtime_env={"env_vars": {k: v for k, v in server_env(demo_root).items() if k.startswith(("BLINK_", "HF_"))}},
    )
    address = ray.get_runtime_context().gcs_address
    assert address.startswith("127.0.0.1:"), address
    yield address
    ray.shutdown()


def answers_of(row: dict) -> dict:
    return {k: v for k, v in row.items() if k.startswith(ANSWER)}


def same_answers(got: list[dict], want: list[dict]) -> None:
    """Every ticket once, with the answers run-batch gives it on one machine."""
    by_ticket = {row["ticket"]: row for row in got}
    assert len(by_ticket) == len(got) == len(want), f"{len(got)} rows, {len(by_ticket)} tickets, {len(want)} wanted"
    for row in want:
        close(answers_of(by_ticket[row["ticket"]]), answers_of(row), row["ticket"])


def test_decider_over_a_ray_dataset_answers_as_run_batch_does(table, cluster, demo_root):
    import ray.data

    from blink.run_batch.ray_data import decide, make_spec
    from blink.settings import Settings

    folder, want = table
    facts = json.loads((folder / "one.jsonl.blink.json").read_text())["facts"]  # what the one-machine run served
    spec = make_spec(
        Settings(model="demo", metrics=False), QUESTIONS, ["text"], ["ticket", "text", "note"], "blink", facts
    )
    ds = ray.data.read_json(str(folder / "t.jsonl"))
    got = decide(ds, spec, actors=2, num_cpus=1, batch_rows=CHUNK).take_all()
    assert list(got[0])[-1] == "blink.error" and [k for k in got[0] if k.startswith(ANSWER)] == list(
        answers_of(want[0])
    )
    same_answers(got, want)
    refused = next(row for row in got if row["ticket"] == "T0005")  # Ray Data's order is not the file's
    one_machine = next(row for row in want if row["ticket"] == "T0005")
    assert refused["blink.error"] == one_machine["blink.error"] == "the state is empty"  # as run-batch writes it


def ray_args(folder, out, cluster: str, actors: int = 2) -> tuple:
    return (
        "--table",
        str(folder / "t.jsonl"),
        "--state-column",
        "text",
        "--questions",
        str(folder / "q.json"),
        "-o",
        str(out),
        "--chunk-rows",
        str(CHUNK),
        "--ray",
        cluster,
        "--ray-actors",
        str(actors),
    )


def parts(out) -> list:
    folder = out.with_name(out.name + ".parts")
    return sorted(folder.glob("part-*.parquet")) if folder.is_dir() else []


def wait_for_parts(proc, out, n: int, timeout: float = 240) -> None:
    deadline = time.time() + timeout
    while len(parts(out)) < n:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.time() < deadline, "no progress"
        time.sleep(0.05)


def test_an_actor_killed_mid_run_is_restarted_and_every_row_is_written_once(table, cluster, demo_root):
    import ray

    from blink.run_batch.ray_run import namespace

    folder, want = table
    out = folder / "killed-actor.jsonl"
    proc = start_batch(demo_root, *ray_args(folder, out, cluster))
    wait_for_parts(proc, out, 2)
    actor = ray.get_actor("blink-decider-0", namespace=namespace(proc.pid))
    ray.kill(actor, no_restart=False)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    same_answers(read_lines(out), want)


def test_a_killed_driver_started_again_finishes_with_every_row_once(table, cluster, demo_root):
    folder, want = table
    out = folder / "killed-driver.jsonl"
    killed = start_batch(demo_root, *ray_args(folder, out, cluster, actors=1))
    wait_for_parts(killed, out, 3)
    killed.send_signal(signal.SIGKILL)
    killed.wait(60)
    kept = len(parts(out))
    assert 3 <= kept < ROWS // CHUNK and not out.exists()

    again = start_batch(demo_root, *ray_args(folder, out, cluster, actors=1))
    _, err = again.communicate(timeout=300)
    assert again.returncode == 0, err[-3000:]
    got = read_lines(out)
    assert [row["ticket"] for row in got] == [row["ticket"] for row in want]  # in order, each once
    same_answers(got, want)


def test_an_actor_of_other_code_or_weights_refuses_to_start(table):
    from blink.run_batch.ray_data import MODEL_FACTS, ActorMismatch, Decider, make_spec
    from blink.settings import Settings

    folder, _ = table
    facts = json.loads((folder / "one.jsonl.blink.json").read_text())["facts"]
    spec = make_spec(Settings(model="demo", metrics=False), QUESTIONS, ["text"], ["text"], "blink", facts)
    spec["versions"] = {**spec["versions"], "blink_code": "0" * 16}  # the driver ran other blink code
    with pytest.raises(ActorMismatch, match="the driver's blink and Ray"):
        Decider(spec)
    expected = {key: facts[key] for key in MODEL_FACTS}
    with pytest.raises(ActorMismatch, match="weights: "):
        Decider._check_model(expected, {**expected, "weights": "sha256:other"})
