"""blink on Ray Data: `Decider`, a callable class for `Dataset.map_batches`, holding one blink engine per actor.

    ds.map_batches(Decider, fn_constructor_kwargs={"spec": spec}, batch_format="pyarrow", concurrency=2,
                   num_cpus=1, num_gpus=0)

Each actor builds its engine the way run-batch does (`build_context`, the routes called in this process), so a row's
answer is what run-batch answers it; a batch comes back with its own columns, then exactly run-batch's answer,
probability and error columns (blink.batch.tables.Answers). A row the engine refuses gets its error in the error
column: it never fails the batch. At its start an actor checks that it serves what the driver expected (model,
revision, adapter, weights fingerprint, calibration, the settings that change answers) and runs the same blink code
and Ray version, and refuses to start otherwise, naming what differs. Ray is imported by nothing here: this module
needs only what the actor runs (`ray` is optional and never needed to serve).
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]
# what must be the same in an actor as in the driver for its answers to be run-batch's
MODEL_FACTS = ("model", "revision", "adapter", "engine", "weights", "calibration", "answers", "limits")


class ActorMismatch(RuntimeError):
    """An actor that would answer differently from what the driver expected."""


def code_digest() -> str:
    """blink's own code as this process runs it: a digest of every module's source (no version number to forget)."""
    digest = hashlib.sha256()
    for path in sorted(PACKAGE.rglob("*.py")):
        digest.update(path.relative_to(PACKAGE).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def versions() -> dict:
    import ray

    return {"blink_code": code_digest(), "ray": ray.__version__}


def model_facts(settings, served, ctx) -> dict:
    """What a row's answer depends on besides its state and the questions (the journal's facts, the subset an
    actor can differ in)."""
    from blink.decide.calibration import weights_fingerprint

    s = settings
    return {
        "model": s.model,
        "revision": s.revision,
        "adapter": [s.adapter, s.adapter_revision],
        "engine": s.engine,
        "weights": weights_fingerprint(served.loaded.root, s.adapter, s.adapter_revision),
        "calibration": ctx.health["calibration"],
        "answers": {"x_order": s.x_order, "x_calibration": s.x_calibration, "prior_states": list(s.prior_states)},
        "limits": vars(s.limits),
    }


def make_spec(settings, questions: dict, state_columns: list, input_columns: list, prefix: str, facts: dict) -> dict:
    """What every actor is built from: the settings, the table's questions and columns, and what it must serve."""
    return {
        "settings": settings,
        "questions": questions,
        "state_columns": list(state_columns),
        "input_columns": list(input_columns),
        "prefix": prefix,
        "expected": {key: facts[key] for key in MODEL_FACTS},
        "versions": versions(),
        "threads": None,
    }


class Decider:
    """One blink engine in this actor; called with a pyarrow Table, returns it with the answer columns."""

    def __init__(self, spec: dict):
        from blink.server import build_context, create_app, load_served

        self._check_versions(spec["versions"])
        if spec.get("threads"):
            import torch

            torch.set_num_threads(spec["threads"])
        settings = spec["settings"]
        served = load_served(settings)
        ctx = build_context(settings, served)
        self._check_model(spec["expected"], model_facts(settings, served, ctx))
        self.answers = answers_for(ctx, spec["questions"], spec["input_columns"], spec["prefix"])
        self.spec, self.model = spec, ctx.served_name
        from blink.batch.inproc import InProcess

        self.client = InProcess(create_app(ctx, metrics=False), retry_s=settings.batch_retry_s)
        s = settings
        self.room = s.max_batch_requests + s.max_queued_requests
        if s.max_places_per_caller:
            self.room = min(self.room, s.max_places_per_caller)
        # one loop per actor, in its own thread: the batcher's tasks live on it between batches, and Ray may
        # call the actor from a thread that runs a loop of its own
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="blink-actor-loop", daemon=True).start()

    @staticmethod
    def _check_versions(expected: dict) -> None:
        here = versions()
        if here != expected:
            raise ActorMismatch(
                f"this actor runs {here}, the driver {expected}: give the cluster the driver's blink and Ray "
                "(runtime_env, or the same image on every node)"
            )

    @staticmethod
    def _check_model(expected: dict, here: dict) -> None:
        from blink.run_batch.journal import differences

        differs = differences(expected, here)
        if differs:
            raise ActorMismatch(f"this actor serves other weights or settings than the driver: {'; '.join(differs)}")

    def __call__(self, batch):
        import pyarrow as pa

        from blink.batch.parts import arrow_type
        from blink.batch.tables import decision_rows

        rows = batch.to_pylist()
        requests = decision_rows(rows, 0, self.spec["state_columns"], self.spec["questions"], self.model, self.answers)
        answered = asyncio.run_coroutine_threadsafe(self._answer(requests), self.loop).result()
        columns = [
            self.answers.empty(r.error["message"]) if r.error is not None else self.answers.of(a)
            for r, a in zip(requests, answered, strict=True)
        ]
        for name, kind in self.answers.columns:
            batch = batch.append_column(name, pa.array([c[name] for c in columns], type=arrow_type(kind)))
        return batch

    def decide(self, batch):
        """The same as calling it: the method run-batch's actors are called by."""
        return self(batch)

    async def _answer(self, requests: list) -> list:
        room = asyncio.Semaphore(self.room)  # rows in flight: what admission holds for one caller

        async def one(row):
            if row.path is None:
                return None
            async with room:
                return await self.client.post(row.path, row.body)

        return await asyncio.gather(*(one(row) for row in requests))


def answers_for(ctx, questions: dict, input_columns: list, prefix: str):
    """The answer columns as run-batch names them for these questions over a table with these columns."""
    from blink.batch.tables import Answers
    from blink.errors import InvalidRequest, StartupError

    try:
        checked = ctx.planner.check({"state": "-", "questions": questions})
    except InvalidRequest as error:
        raise StartupError(f"the questions: {error.message}") from None
    return Answers(checked.decision.questions, input_columns, prefix)


def decide(ds, spec: dict, actors: int, num_cpus: float = 1, num_gpus: float = 0, batch_rows: int = 256):
    """`ds` with the answer columns: `actors` engines (each `num_cpus` CPUs and `num_gpus` GPUs, fractions
    allowed), `batch_rows` rows per call."""
    return ds.map_batches(
        Decider,
        fn_constructor_kwargs={"spec": spec},
        batch_format="pyarrow",
        batch_size=batch_rows,
        concurrency=actors,
        num_cpus=num_cpus,
        num_gpus=num_gpus or None,
        zero_copy_batch=True,
    )
