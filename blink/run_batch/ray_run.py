"""`run-batch --table … --ray ADDRESS --ray-actors N`: a table labelled by N blink engines on a Ray cluster.

The table is read by Ray Data's reader (CSV every column as text, as run-batch reads it; JSONL; Parquet) in
order, in chunks of `--chunk-rows` rows: chunk `k` is rows `[k·n, (k+1)·n)`, whatever the reader's blocks are.
A chunk whose part is written already is skipped; the others go to the actors (blink.run_batch.ray_data.Decider),
two in flight per actor, and each answer comes back as a Parquet part under its fixed name (journal.py: whole or
not at all). The parts are joined into the output as on one machine. So a driver killed at any point and started
again with the same arguments decides only what is missing, and the output holds every row once.

An actor killed mid-run is restarted by Ray (`max_restarts`) and the chunks it held are sent again
(`max_task_retries`): an actor's call has no effect outside it, so a retry only answers the chunk again. The
parts are written here, not by Ray Data's writers, whose file names follow write tasks, not row ranges, and so
could not say which rows a rerun may skip.

`local` starts a one-machine cluster bound to loopback, without the dashboard, with room for Ray Data's reader
beside the actors (a cluster whose every CPU is taken by an actor never starts its reader).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from blink.errors import StartupError
from blink.run_batch.journal import write_atomically

IN_FLIGHT_PER_ACTOR = 2
RESTARTS = 4
OBJECT_STORE_BYTES = 256 << 20  # /dev/shm is small in containers: chunks pass through, none is kept
ENV_PREFIXES = ("BLINK_", "HF_", "TRANSFORMERS_")


def namespace(pid: int) -> str:
    """The driver's actors are named `blink-decider-{i}` in this namespace (found by name, e.g. to be stopped)."""
    return f"blink-run-batch-{pid}"


def runtime_env() -> dict:
    """What every worker gets from the driver: blink's own path first, and the model's settings from the
    environment (BLINK_*, HF_*: where weights and the Hub cache are)."""
    root = str(Path(__file__).resolve().parents[2])
    env = {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIXES)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    return {"env_vars": env}


def loopback(address: str) -> None:
    """Before Ray is imported (it reads these once): no usage reports; `local` in Ray's one-machine mode, every
    address 127.0.0.1 rather than the host's network address."""
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    if address == "local" or address.startswith(("127.0.0.1:", "localhost:")):
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"


def connect(address: str, actors: int, cpus: float) -> None:
    import ray

    common = {"namespace": namespace(os.getpid()), "runtime_env": runtime_env(), "log_to_driver": False}
    if address == "local":
        ray.init(
            num_cpus=max(4, math.ceil(actors * cpus) + 2),
            include_dashboard=False,
            object_store_memory=OBJECT_STORE_BYTES,
            **common,
        )
    else:
        ray.init(address=address, **common)


def read(path: str, fmt: str, columns: list[str], dialect):
    """The table as Ray Data reads it, in the file's order (a CSV in its encoding and delimiter: Table's dialect)."""
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import ray

    ray.data.DataContext.get_current().execution_options.preserve_order = True
    if fmt == "parquet":
        return ray.data.read_parquet(path)
    if fmt == "csv":
        types = {name: pa.string() for name in columns}
        convert = pcsv.ConvertOptions(column_types=types, strings_can_be_null=False)
        options = {"read_options": dialect.read_options(), "parse_options": dialect.parse_options()}
        return ray.data.read_csv(path, convert_options=convert, file_extensions=None, **options)
    return ray.data.read_json(path, file_extensions=None)


def start_actors(spec: dict, actors: int, cpus: float, gpus: float) -> list:
    import ray

    from blink.run_batch.ray_data import Decider

    remote = ray.remote(Decider)
    options = {"num_cpus": cpus, "num_gpus": gpus, "max_restarts": RESTARTS, "max_task_retries": RESTARTS}
    handles = [remote.options(name=f"blink-decider-{i}", **options).remote(spec) for i in range(actors)]
    ray.get([h.__ray_ready__.remote() for h in handles])  # an actor that refuses to start says why, here
    return handles


class RayRun:
    """The chunks not yet written, decided by the actors, each written as its part as it comes back."""

    def __init__(self, journal, progress, handles: list):
        self.journal, self.progress, self.handles = journal, progress, handles
        self.free = [h for h in handles for _ in range(IN_FLIGHT_PER_ACTOR)]
        self.flying: dict = {}  # ObjectRef -> (k, actor)
        self.chunks = 0

    def run(self, batches) -> int:
        """Every chunk; returns how many the table has."""
        for k, batch in enumerate(batches):
            self.chunks = k + 1
            if self.journal.done(k, "parquet"):
                self.progress.skip(batch.num_rows, self._stats(k).get("errors", 0))
                continue
            if not self.free:
                self._collect(1)
            actor = self.free.pop(0)
            self.flying[actor.decide.remote(batch)] = (k, actor)
        self._collect(len(self.flying))
        return self.chunks

    def _collect(self, n: int) -> None:
        import ray

        for _ in range(n):
            ready, _ = ray.wait(list(self.flying), num_returns=1)
            k, actor = self.flying.pop(ready[0])
            self._write(k, ray.get(ready[0]))
            self.free.append(actor)

    def _write(self, k: int, table) -> None:
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        final = self.journal.part(k, "parquet")
        tmp = final.with_name(final.name + ".tmp")
        pq.write_table(table, tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        errors = table.num_rows - pc.sum(pc.is_null(table.column(table.num_columns - 1))).as_py()
        write_atomically(self.journal.part(k, "stats.json"), b'{"rows": %d, "errors": %d}' % (table.num_rows, errors))
        os.replace(tmp, final)
        self.progress.add(table.num_rows, errors, 0)

    def _stats(self, k: int) -> dict:
        import orjson

        try:
            return orjson.loads(self.journal.part(k, "stats.json").read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return {}


def run(plan, ctx, served, journal) -> int:
    """run-batch's table on the cluster; 0 once every row has its line in the output."""
    from blink.batch.parts import TableParts
    from blink.run_batch.progress import Progress
    from blink.run_batch.ray_data import make_spec
    from blink.run_batch.runner import join

    args = plan.args
    loopback(args.ray)
    try:
        import ray
    except ImportError:
        raise StartupError('run-batch --ray needs Ray: pip install "ray[data]==2.60.0"') from None
    connect(args.ray, args.ray_actors, args.ray_cpus)
    try:
        spec = make_spec(
            plan.settings,
            plan.questions,
            args.state_column,
            plan.table.columns,
            args.answer_prefix,
            journal.facts,
        )
        spec["threads"] = max(1, int(args.ray_cpus))
        handles = start_actors(spec, args.ray_actors, args.ray_cpus, args.ray_gpus)
        progress = Progress(None, args.quiet, every_s=args.progress_every)
        source = read(plan.input, plan.table.format, plan.table.columns, plan.table.dialect)
        batches = source.iter_batches(batch_size=args.chunk_rows, batch_format="pyarrow", drop_last=False)
        try:
            chunks = RayRun(journal, progress, handles).run(batches)
        except ray.exceptions.RayTaskError as error:  # the reader's (a line that is not an object); parts kept
            raise StartupError(
                f"{plan.input}: Ray Data cannot read on: {getattr(error, 'cause', None) or error}"
            ) from None
        join(journal, TableParts(plan.answers, "parquet", plan.out_format, plan.table.dialect.delimiter), chunks)
        summary = progress.summary()
        journal.finished(summary)
        progress.close(summary)
        return 0
    finally:
        ray.shutdown()
