"""blink against the compute floor, side by side in one process: what a decision costs against what its tokens cost.

    .venv/bin/python bench/latency/floor.py [--model large] [--state-tokens 1000] [--reps 7] [--threads 2]

- **engine**: the engine's steps as a server runs them for one request (`prepare`, `score`, `answer`; no HTTP), on a
  ~`--state-tokens` state and Q questions (1 / 6 / 16).
- **served**: the same request's round trip to `python -m blink serve` on the same model (loopback HTTP, the
  server's defaults): the engine plus everything a server adds (body, checks, admission, batching, thread hops).
- **floor**: one forward pass of the same model's decoder (no LM head: a decision reads only label rows) over the
  same number of tokens as the request's `usage.input_tokens` (the state counted once), one sequence, no cache.
- **cold**: a state never seen. **warm**: the same state again with new questions (what repeats is the state); its
  floor is the decoder over the tokens the request really had to run (`input_tokens - cached_tokens`).
- **floor resuming the state** (warm only): the same new tokens as one sequence, but continuing from the state's
  saved cache, as a decision's rows must: they attend to the state's tokens. Still one pass, no padding, no copy
  of the state (copied before the clock starts): the least any exact reading of the state can cost.

The two sides alternate rep by rep (medians); the machine's load is printed before and after, since these
machines are shared: read the ratios, measured side by side, not the milliseconds.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: offline.py and the shared modules
import offline  # noqa: F401 - first: the repository importable, the Hub off

# isort: split

import torch
import workload

# the server side (httpx, bench/servers.py, the suite's helpers) is imported by `main` alone: Floor is imported by the
# other benches, bench/gpu/gpu_bulk.py on a GPU box among them, which have no use for it


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def request_tokens(prompts) -> int:
    """`usage.input_tokens`: the tokens of every prompt with the shared state counted once."""
    state = prompts[0].state_end
    return state + sum(len(p.ids) - state for p in prompts) if state else sum(len(p.ids) for p in prompts)


def synchronizer(device: torch.device) -> Callable[[], None]:
    """What waits for a device's queued work before a clock is read: `torch.cuda.synchronize` on CUDA (kernels run
    after the call that launched them returns), nothing on the CPU (a pass has run when its call returns)."""
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


class Floor:
    """The decoder alone over n tokens: embeddings in, last hidden states out, no cache kept; on the model's device,
    each time read after `sync()` (a no-op on the CPU, `torch.cuda.synchronize` on CUDA unless told otherwise)."""

    def __init__(self, loaded, vocab_ids: list[int], sync: Callable[[], None] | None = None):
        from blink.executor.decoder import decoder_of

        self.decoder, _ = decoder_of(loaded.model)
        self.embed = self.decoder.get_input_embeddings()
        self.device = self.embed.weight.device
        self.sync = sync if sync is not None else synchronizer(self.device)
        self.ids = vocab_ids
        self._saved = None  # (state tokens, their cache) for `resumed`

    def _on_thread(self, fn, *args):
        # on the CPU, on the thread that runs the engine's passes: one OpenMP pool in this process
        # (compute_thread.py); on a GPU, here, as the engine's calls run
        from blink.executor.compute_thread import on_cpu_thread

        return on_cpu_thread(self.device, fn, *args)

    def _clock(self) -> float:
        self.sync()
        return time.perf_counter()

    def __call__(self, n: int) -> float:
        return self._on_thread(self._timed, n)

    def resumed(self, state: int, n: int) -> float:
        """The decoder over n tokens that continue a `state`-token sequence whose cache is already computed."""
        return self._on_thread(self._timed_resumed, state, n)

    def _tokens(self, n: int, offset: int = 0):
        ids = (self.ids * ((n + offset) // len(self.ids) + 1))[offset : offset + n]
        return torch.tensor([ids], device=self.device)

    @torch.inference_mode()
    def _timed(self, n: int) -> float:
        ids = self._tokens(n)
        start = self._clock()
        self.decoder(inputs_embeds=self.embed(ids), use_cache=False)
        return self._clock() - start

    @torch.inference_mode()
    def _timed_resumed(self, state: int, n: int) -> float:
        if self._saved is None or self._saved[0] != state:
            out = self.decoder(inputs_embeds=self.embed(self._tokens(state)), use_cache=True)
            self._saved = (state, out.cache)
        cache = copy.deepcopy(self._saved[1])
        ids = self._tokens(n, offset=state)
        positions = torch.arange(state, state + n, device=self.device).unsqueeze(0)
        start = self._clock()
        self.decoder(inputs_embeds=self.embed(ids), cache=cache, use_cache=True, position_ids=positions)
        return self._clock() - start

    def rows(self, rows: int, length: int, batch: int) -> float:
        """The decoder over `rows` sequences of `length` tokens, `batch` at a time (a batched call's floor), with the
        Gated DeltaNet rule's chunk the engine picks where its reference rule runs (blink.executor.passes)."""
        ids = self._tokens(length).repeat(min(batch, rows), 1)
        return self._on_thread(self._timed_rows, rows, ids, batch, self._rule_chunk(length))

    def _rule_chunk(self, length: int) -> dict:
        """The Gated DeltaNet rule's chunk the engine picks for `length`-token rows where its reference rule runs."""
        from blink.executor.decoder import has_linear_attention
        from blink.executor.passes import delta_rule_chunk, fla_version

        reference = has_linear_attention(self.decoder.config) and fla_version() is None
        return {"chunk_size": delta_rule_chunk(length)} if reference else {}

    def rows_resumed(self, state: int, rows: int, length: int, batch: int) -> float:
        """`rows` sequences of `length` tokens continuing one `state`-token sequence whose cache is computed (not
        timed: `self(state)` is its cost), `batch` at a time, each batch attending to the state through a copy of
        its cache with one row per sequence (the questions of one decision, as the engine fans out its state)."""
        ids = self._tokens(length, offset=state).repeat(min(batch, rows), 1)
        return self._on_thread(self._timed_rows_resumed, state, rows, ids, batch, self._rule_chunk(length))

    @torch.inference_mode()
    def _timed_rows_resumed(self, state: int, rows: int, ids, batch: int, chunk: dict) -> float:
        from blink.executor.prefix_cache import shared_structure

        if self._saved is None or self._saved[0] != state:
            out = self.decoder(inputs_embeds=self.embed(self._tokens(state)), use_cache=True)
            self._saved = (state, out.cache)
        length = ids.shape[1]
        positions = torch.arange(state, state + length, device=self.device).expand(ids.shape[0], length)
        start = self._clock()
        for at in range(0, rows, batch):
            n = min(batch, rows - at)
            cache = shared_structure(self._saved[1])
            # one row per sequence: new tensors
            cache.reorder_cache(torch.zeros(n, dtype=torch.long, device=self.device))
            embeds = self.embed(ids[:n])
            self.decoder(inputs_embeds=embeds, cache=cache, use_cache=True, position_ids=positions[:n], **chunk)
        return self._clock() - start

    @torch.inference_mode()
    def _timed_rows(self, rows: int, ids, batch: int, chunk: dict) -> float:
        start = self._clock()
        for at in range(0, rows, batch):
            self.decoder(inputs_embeds=self.embed(ids[: min(batch, rows - at)]), use_cache=False, **chunk)
        return self._clock() - start


def blink_once(engine, body) -> tuple[float, int, int]:
    """One request through the engine: seconds, input tokens, cached tokens."""
    start = time.perf_counter()
    prepared = engine.prepare(body)
    (scored,) = engine.score([prepared.prompts])
    engine.answer(prepared, scored.result())
    return time.perf_counter() - start, request_tokens(prepared.prompts), scored.cached_tokens


def served_once(client, body: dict) -> float:
    start = time.perf_counter()
    r = client.post("/v1/systemone", json=body)
    took = time.perf_counter() - start
    r.raise_for_status()
    return took


def ratio(ms: dict, side: str, floor: str) -> str:
    return f"{ms[side]:.0f} / {ms[floor]:.0f} ms = {ms[side] / ms[floor]:.2f}x"


def bench_engine(name: str, prefix_cache_bytes: int = 2 << 30):
    """The model a bench names (`demo`, `large`: the ~150M CPU benchmark model, built on first use; or a path),
    loaded, with blink's engine over it: (its path, the loaded model, the engine, millions of parameters)."""
    from blink.decide.planner import Engine
    from blink.model.demo import demo_model_dir
    from blink.model.loading import load

    model = str(demo_model_dir(name)) if name in ("demo", "large") else name
    loaded = load(model)
    params = sum(p.numel() for p in loaded.model.parameters()) / 1e6
    return model, loaded, Engine(loaded, prefix_cache_bytes=prefix_cache_bytes), params


def main() -> None:
    import httpx
    from servers import DEMO_ROOT, blink_serve

    from helpers import running

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="large", help="demo, large (the ~150M CPU benchmark model) or a path")
    parser.add_argument("--state-tokens", type=int, default=1000)
    parser.add_argument("--questions", default="1,6,16")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    model, loaded, engine, params = bench_engine(args.model)
    tokenizer = loaded.tokenizer
    floor = Floor(loaded, tokenizer(workload.text_of_tokens(tokenizer, 256, 0), add_special_tokens=False)["input_ids"])
    print(f"model {args.model} ({params:.0f}M params), {args.threads} thread(s), {args.reps} reps")
    print(f"load average before: {load_average()}")
    blink_once(engine, workload.body(tokenizer, args.model, 64, 2, 1))  # warm the code paths
    floor(64)

    with (
        running(blink_serve(model=model), DEMO_ROOT, name="floor-serve") as url,
        httpx.Client(base_url=url, timeout=300) as client,
    ):
        served_once(client, workload.body(tokenizer, args.model, 64, 2, 1))
        table(args, engine, floor, tokenizer, client)
    print(f"\nload average after: {load_average()}")


def table(args, engine, floor: Floor, tokenizer, client) -> None:
    print(
        "\n| questions | tokens (cold / warm new) | cold: engine / floor | cold: served / floor "
        "| warm: engine / floor over the new tokens | warm: served / floor over the new tokens "
        "| warm: served / floor resuming the state |"
    )
    print("|---|---|---|---|---|---|---|")
    seed = 10_000
    for n_questions in map(int, args.questions.split(",")):
        names = ("cold", "cold_served", "cold_floor", "warm", "warm_served", "warm_floor", "warm_resumed")
        rows = {k: [] for k in names}
        tokens = new = 0
        for rep in range(args.reps):
            seed += 2
            # cold: a state never seen, once in the engine and once (another state) by the server
            body = workload.body(tokenizer, args.model, args.state_tokens, n_questions, seed)
            other = workload.body(tokenizer, args.model, args.state_tokens, n_questions, seed + 1)
            again = {**body, "questions": workload.questions(n_questions, seed + 7)}  # same state, new questions
            other_again = {**other, "questions": again["questions"]}
            tokens = request_tokens(engine.prepare(body).prompts)
            steps = [
                ("cold_floor", lambda: floor(tokens)),
                ("cold", lambda: blink_once(engine, body)[0]),
                ("cold_served", lambda: served_once(client, other)),
            ]
            for name, step in steps if rep % 2 == 0 else steps[::-1]:  # alternate who goes first
                rows[name].append(step())
            t, warm_tokens, cached = blink_once(engine, again)
            new = warm_tokens - cached
            rows["warm"].append(t)
            rows["warm_served"].append(served_once(client, other_again))
            rows["warm_floor"].append(floor(max(1, new)))
            rows["warm_resumed"].append(floor.resumed(cached, max(1, new)))
        ms = {k: statistics.median(v) * 1000 for k, v in rows.items()}
        print(
            f"| {n_questions} | {tokens} / {new} | {ratio(ms, 'cold', 'cold_floor')} "
            f"| {ratio(ms, 'cold_served', 'cold_floor')} | {ratio(ms, 'warm', 'warm_floor')} "
            f"| {ratio(ms, 'warm_served', 'warm_floor')} | {ratio(ms, 'warm_served', 'warm_resumed')} |"
        )


if __name__ == "__main__":
    main()
