"""blink on Ray: one actor with one torch thread against two actors with one thread each, the same rows, in one run;
and Ray's own cost per block against the engine's time per block.

    .venv/bin/python bench/scale_out/ray_scale.py [--model large] [--rows 2000] [--state-tokens 60] [--chunk-rows 64]

A local Ray cluster (loopback, no dashboard, 4 logical CPUs: room for the reader beside two actors). Each side
starts its actors (blink.run_batch.ray_data.Decider, `torch.set_num_threads(1)`), waits until they are ready (model
loading is not timed), then sends the table's chunks, two in flight per actor, as `run-batch --ray` does; rows/s
is over the chunks' wall time. Ray's cost per block: one actor, one block at a time, the driver's round trip
(put, schedule, call, the answer back) less the engine's own time in the actor. The load average is printed
before and after: these machines are shared, read the ratio (>= 1.5x expected on an idle 2-core machine).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: offline.py and the shared modules

import offline  # noqa: F401 - first: the repository importable, the Hub off

# isort: split

from latency.floor import load_average
from servers import DEMO_ROOT
from throughput.batch import write_table

from blink.run_batch.ray_data import Decider


class TimedDecider(Decider):
    def timed(self, batch):
        start = time.perf_counter()
        out = self(batch)
        return out, time.perf_counter() - start


def start(ray, spec: dict, actors: int) -> list:
    remote = ray.remote(TimedDecider).options(num_cpus=1)
    handles = [remote.remote(spec) for _ in range(actors)]
    ray.get([h.__ray_ready__.remote() for h in handles])
    return handles


def rate(ray, handles: list, batches: list) -> dict:
    """Rows/s with every chunk sent, two in flight per actor."""
    free, flying, rows = [h for h in handles for _ in range(2)], {}, 0
    begin = time.perf_counter()
    for batch in batches:
        if not free:
            ready, _ = ray.wait(list(flying), num_returns=1)
            free.append(flying.pop(ready[0]))
            rows += ray.get(ready[0])[0].num_rows
        actor = free.pop(0)
        flying[actor.timed.remote(batch)] = actor
    for ref in flying:
        rows += ray.get(ref)[0].num_rows
    return {"rows": rows, "rows_per_s": rows / (time.perf_counter() - begin)}


def overhead(ray, handle, batches: list) -> dict:
    """One block at a time: the driver's round trip against the engine's time in the actor, per block."""
    trips, engine = [], []
    for batch in batches:
        begin = time.perf_counter()
        _, spent = ray.get(handle.timed.remote(batch))
        trips.append(time.perf_counter() - begin)
        engine.append(spent)
    ray_cost = [t - e for t, e in zip(trips, engine)]
    return {"engine_s": statistics.median(engine), "ray_s": statistics.median(ray_cost)}


def spec_for(model: str, questions: dict) -> dict:
    import dataclasses

    from blink.run_batch.command import BATCH_DEFAULTS
    from blink.run_batch.ray_data import make_spec, model_facts
    from blink.server import build_context, load_served
    from blink.settings import Settings

    settings = dataclasses.replace(Settings(model=model, metrics=False), **BATCH_DEFAULTS)
    served = load_served(settings)
    facts = model_facts(settings, served, build_context(settings, served))
    spec = make_spec(settings, questions, ["text"], ["row", "text"], "blink", facts)
    spec["threads"] = 1
    return spec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="large", help="demo, large (built on first use), or a model folder")
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--state-tokens", type=int, default=60)
    parser.add_argument("--chunk-rows", type=int, default=64)
    args = parser.parse_args()
    os.environ.setdefault("BLINK_DEMO_DIR", str(DEMO_ROOT))
    from blink.run_batch.ray_run import loopback, runtime_env

    loopback("local")
    import ray

    from blink.model.demo import demo_model_dir
    from blink.model.loading import load

    model = str(demo_model_dir(args.model)) if args.model in ("demo", "large") else args.model
    print(f"model {model}; {args.rows} rows of ~{args.state_tokens} tokens x 3 questions; load {load_average()}")
    with tempfile.TemporaryDirectory() as tmp:
        table, _, questions = write_table(load(model, weights=False).tokenizer, Path(tmp), args.rows, args.state_tokens)
        spec = spec_for(model, questions)
        ray.init(
            num_cpus=4,
            include_dashboard=False,
            object_store_memory=256 << 20,
            log_to_driver=False,
            runtime_env=runtime_env(),
        )
        try:
            batches = list(
                ray.data.read_json(str(table)).iter_batches(batch_size=args.chunk_rows, batch_format="pyarrow")
            )
            one = start(ray, spec, 1)
            rate(ray, one, batches[:2])  # warm-up
            single = rate(ray, one, batches)
            cost = overhead(ray, one[0], batches[: min(len(batches), 8)])
            ray.kill(one[0])
            two = start(ray, spec, 2)
            rate(ray, two, batches[:4])
            double = rate(ray, two, batches)
        finally:
            ray.shutdown()
    print(f"one actor, one thread: {single['rows_per_s']:.2f} rows/s; load {load_average()}")
    print(f"two actors, one thread each: {double['rows_per_s']:.2f} rows/s; load {load_average()}")
    print(f"ratio: {double['rows_per_s'] / single['rows_per_s']:.2f}x")
    print(
        f"per block of {args.chunk_rows} rows: engine {cost['engine_s'] * 1000:.1f} ms, Ray's own (serialization, "
        f"scheduling, transfer) {cost['ray_s'] * 1000:.1f} ms ({100 * cost['ray_s'] / cost['engine_s']:.1f}%)"
    )


if __name__ == "__main__":
    main()
