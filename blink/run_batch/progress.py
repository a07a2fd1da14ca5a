"""What a run shows while it works: tqdm's bar on a terminal (rows/s, ETA, errors so far), a plain line every few
seconds when stderr is not a terminal (a log, CI: `--progress-every`, from a thread of its own, so a line comes while
a long model call is running too), a summary at the end; nothing but errors with `--quiet`. Rows count as each is
answered, not when its chunk is written; errors when their chunk is written (the part writer decides what is one)."""

from __future__ import annotations

import sys
import threading
import time

PLAIN_EVERY_S = 5.0


class Progress:
    def __init__(self, total: int | None, quiet: bool = False, stream=None, every_s: float = PLAIN_EVERY_S):
        self.stream = stream or sys.stderr
        self.total, self.quiet = total, quiet
        self.done = self.errors = self.skipped = self.tokens = 0
        self.started = time.perf_counter()
        self.lock = threading.Lock()
        self.closed = threading.Event()
        self.bar = None
        if quiet:
            return
        if self.stream.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="row", file=self.stream, dynamic_ncols=True, smoothing=0.1)
        else:
            threading.Thread(target=self._lines, args=(every_s,), name="run-batch-progress", daemon=True).start()

    def _lines(self, every_s: float) -> None:
        while not self.closed.wait(every_s):
            print(self.line(), file=self.stream, flush=True)

    def resuming(self, output: str, rows: int) -> None:
        """Said at the start of a run that finds rows an earlier one wrote."""
        if rows and not self.quiet:
            print(f"run-batch: resuming {output}: {rows} rows already written; deciding the rest", file=self.stream)

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

    def answered(self, tokens: int) -> None:
        """One row answered (or refused before it was sent)."""
        self.add(1, 0, tokens)

    def written(self, errors: int) -> None:
        """A chunk written: its error rows."""
        self.add(0, errors, 0)

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
        self.closed.set()
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
