"""What a run shows while it works: tqdm's bar on a terminal (rows/s, ETA, errors so far), a plain line every few
seconds when stderr is not a terminal (a log, CI), a summary at the end; nothing but errors with `--quiet`."""

from __future__ import annotations

import sys
import threading
import time

PLAIN_EVERY_S = 5.0


class Progress:
    def __init__(self, total: int | None, quiet: bool = False, stream=None):
        self.stream = stream or sys.stderr
        self.total, self.quiet = total, quiet
        self.done = self.errors = self.skipped = self.tokens = 0
        self.started = self.last = time.perf_counter()
        self.lock = threading.Lock()
        self.bar = None
        if not quiet and self.stream.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="row", file=self.stream, dynamic_ncols=True, smoothing=0.1)

    def set_total(self, total: int) -> None:
        with self.lock:
            self.total = total
            if self.bar is not None:
                self.bar.total = total
                self.bar.refresh()

    def skip(self, rows: int, errors: int = 0) -> None:
        """Rows an earlier run wrote: counted, not timed."""
        with self.lock:
            self.skipped += rows
            self.errors += errors
            if self.bar is not None:
                self.bar.update(rows)

    def add(self, rows: int, errors: int, tokens: int) -> None:
        with self.lock:
            self.done += rows
            self.errors += errors
            self.tokens += tokens
            if self.bar is not None:
                self.bar.set_postfix(errors=self.errors, refresh=False)
                self.bar.update(rows)
            elif not self.quiet and time.perf_counter() - self.last >= PLAIN_EVERY_S:
                self.last = time.perf_counter()
                print(self.line(), file=self.stream, flush=True)

    def rate(self) -> float:
        return self.done / max(time.perf_counter() - self.started, 1e-9)

    def line(self) -> str:
        rows = self.done + self.skipped
        of = f"/{self.total} rows ({100 * rows / self.total:.0f}%)" if self.total else " rows"
        eta = ""
        if self.total and self.done:
            eta = f", ETA {max(self.total - rows, 0) / self.rate():.0f} s"
        return f"run-batch: {rows}{of}, {self.rate():.1f} rows/s, {self.errors} errors{eta}"

    def summary(self) -> dict:
        return {
            "rows": self.done + self.skipped,
            "decided_now": self.done,
            "written_before": self.skipped,
            "errors": self.errors,
            "input_tokens": self.tokens,
            "seconds": round(time.perf_counter() - self.started, 3),
            "rows_per_s": round(self.rate(), 3),
        }

    def close(self, summary: dict | None = None, stopped: bool = False) -> None:
        if self.bar is not None:
            self.bar.close()
        if self.quiet:
            return
        s = summary or self.summary()
        what = "stopped" if stopped else "done"
        before = f" ({s['written_before']} written before)" if s["written_before"] else ""
        print(
            f"run-batch {what}: {s['rows']} rows{before}, {s['errors']} errors, {s['input_tokens']} input tokens, "
            f"{s['rows_per_s']} rows/s over {s['seconds']} s",
            file=self.stream,
            flush=True,
        )


def count_lines(path: str) -> int:
    """Lines in a file, read in blocks (a GB in about a second): the bar's total."""
    n = 0
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            n += block.count(b"\n")
    return n
