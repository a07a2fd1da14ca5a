"""The GPU bench's run-batch row: rows of ~60-token states, each asked the same three questions (noul, choice of 4,
score of 3-5: bench/workload.py), decided as run-batch decides them (its default `--max-batch-requests`: 64 rows a
model call), against the decoder alone over the same tokens (each row's, the state counted once) as equal sequences
of the rows' mean length at its best batch: what the tokens cost at the decoder's best batch (the CPU's twin is
bench/throughput/batch.py, which runs the command itself; here the engine's calls, without the in-process route
pipeline, which costs 0.7-2 ms of CPU a row: bench/RESULTS.md). The floor is bench/latency/floor.py's `Floor.rows`,
the one every bench measures it with, its clock read after `torch.cuda.synchronize` on CUDA (a no-op on the CPU)."""

from __future__ import annotations

import statistics

import workload
from latency.floor import Floor

ROWS = 512
CALL_ROWS = 64  # run-batch's default --max-batch-requests
FLOOR_BATCHES = (16, 64, 256)


def bulk_row(engine, model, tokenizer, device: str, timed) -> dict:
    """rows/s of run-batch's calls and of the floor over `model` (the engine's); `timed(fn, device, reps)` -> ms per
    rep of our calls (synchronized)."""
    questions = workload.questions(3)
    bodies = [
        {**workload.body(tokenizer, "blink-4b-random", 60, 0, seed=20_000 + i), "questions": questions}
        for i in range(ROWS)
    ]
    prepared = [engine.prepare(body) for body in bodies]
    length = max(1, round(sum(p.input_tokens for p in prepared) / ROWS))

    def calls():
        for at in range(0, ROWS, CALL_ROWS):
            for scored in engine.score([p.prompts for p in prepared[at : at + CALL_ROWS]]):
                scored.result()

    calls()  # warm: every shape timed below runs once first
    ours_s = statistics.median(timed(calls, device, 3)) / 1000

    assert engine.loaded.model is model, "the floor is the engine's own model's decoder"
    floor = Floor(engine.loaded, list(range(1000, 3000)))  # each row tokens 1000, 1001, ...: no padding, no cache
    rates = {}
    for batch in FLOOR_BATCHES:
        floor.rows(ROWS, length, batch)  # warm
        rates[batch] = ROWS / statistics.median(floor.rows(ROWS, length, batch) for _ in range(3))
    best = max(rates, key=rates.get)
    return {
        "rows": ROWS,
        "tokens_per_row": length,
        "rows_per_s": ROWS / ours_s,
        "floor_rows_per_s": rates[best],
        "floor_batch": best,
        "floor_by_batch": rates,
    }


def bulk_line(bulk: dict) -> str:
    """The row as the table prints it."""
    ratio = bulk["rows_per_s"] / bulk["floor_rows_per_s"]
    return (
        f"| run-batch's calls, {bulk['rows']} rows × 3 q (~60-token states; issue 49: ≥ 0.9× the floor) | "
        f"{bulk['tokens_per_row']} a row | {bulk['rows_per_s']:.1f} rows/s ({CALL_ROWS} rows a call) | | "
        f"decoder alone, batch {bulk['floor_batch']}: {bulk['floor_rows_per_s']:.1f} rows/s | "
        f"{ratio:.2f}× the floor | |"
    )
