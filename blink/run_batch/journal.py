"""What makes a run resumable, exactly once: a sidecar beside the output saying what the answers depend on, and the
finished chunks as part files under fixed names.

Chunks grow from `FIRST_CHUNK_ROWS` rows, doubling up to `n` (`--chunk-rows`), then stay at `n` (`chunk_sizes`), the
same for every run of the same arguments: a run killed in its first minute keeps the small chunks it finished,
while a long run writes few large parts. A part is written whole under a temporary name
and renamed, so it is either all there or not at all; a run killed at any point and started again with the same
arguments skips the chunks whose parts exist and decides the rest. The sidecar (`OUT.blink.json`) records the model,
revision, weights fingerprint, calibration, questions and settings that change answers; a rerun that differs in any
is refused, naming what differs, so the answers of two models never mix in one output. Once every chunk is written
the parts are joined into OUT (also under a temporary name, then renamed), the sidecar says the run is complete and
the parts are removed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import orjson

from blink.errors import StartupError

SIDE_SUFFIX = ".blink.json"
FIRST_CHUNK_ROWS = 16
PARTS_SUFFIX = ".parts"


def chunk_sizes(n: int) -> Iterator[int]:
    """The rows of chunk 0, 1, 2, …: 16, 32, 64, … up to `n`, then `n` (n = 256: 240 rows in the first four)."""
    size = min(FIRST_CHUNK_ROWS, n)
    while True:
        yield size
        size = min(2 * size, n)


def input_identity(path: str) -> dict:
    """The input file as a rerun must find it again: its size and a digest of its first and last MiB."""
    size = os.path.getsize(path)
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        digest.update(fh.read(1 << 20))
        if size > 2 << 20:
            fh.seek(size - (1 << 20))
            digest.update(fh.read())
    return {"path": os.path.abspath(path), "bytes": size, "sha256_head_tail": digest.hexdigest()}


class Journal:
    def __init__(self, output: str, facts: dict, overwrite: bool = False):
        self.output = Path(output)
        self.side = Path(output + SIDE_SUFFIX)
        self.parts = Path(output + PARTS_SUFFIX)
        self.facts = facts
        self.complete = False
        self._open(overwrite)

    def _open(self, overwrite: bool) -> None:
        if overwrite:
            self.clear()
        if self.side.is_file():
            recorded = orjson.loads(self.side.read_bytes())
            differs = differences(recorded.get("facts", {}), self.facts)
            if differs:
                raise StartupError(
                    f"{self.output} was started with other settings ({'; '.join(differs)}): its answers would mix "
                    f"with these. Use another output file, or --overwrite to start it again"
                )
            self.complete = bool(recorded.get("complete")) and self.output.exists()
        elif self.output.exists():
            raise StartupError(
                f"{self.output} exists and no unfinished run-batch wrote it: use another output file, or --overwrite"
            )
        if not self.complete:
            self.parts.mkdir(parents=True, exist_ok=True)
            self._record(complete=False)

    def clear(self) -> None:
        for path in (self.output, self.side):
            path.unlink(missing_ok=True)
        shutil.rmtree(self.parts, ignore_errors=True)

    def _record(self, complete: bool, summary: dict | None = None) -> None:
        body = {"facts": self.facts, "complete": complete, "summary": summary}
        write_atomically(self.side, orjson.dumps(body, option=orjson.OPT_INDENT_2))

    def part(self, k: int, ext: str) -> Path:
        return self.parts / f"part-{k:06d}.{ext}"

    def done(self, k: int, ext: str) -> bool:
        return self.part(k, ext).is_file()

    def written(self, ext: str) -> int:
        """The rows in the parts an earlier run wrote (each part's stats file beside it says how many)."""
        rows = 0
        for part in self.parts.glob(f"part-*.{ext}"):
            try:
                rows += orjson.loads(part.with_suffix(".stats.json").read_bytes()).get("rows", 0)
            except (OSError, orjson.JSONDecodeError):
                continue  # counted when the run reaches it
        return rows

    def finished(self, summary: dict) -> None:
        """OUT is in place: the run is complete; its parts go."""
        self._record(complete=True, summary=summary)
        shutil.rmtree(self.parts, ignore_errors=True)


def differences(recorded, now, where: str = "") -> list[str]:
    """What differs, by path (`questions.urgent`): objects are compared key by key, anything else whole."""
    if isinstance(recorded, dict) and isinstance(now, dict):
        out = []
        for key in [*recorded, *(k for k in now if k not in recorded)]:
            out += differences(recorded.get(key, ABSENT), now.get(key, ABSENT), f"{where}.{key}" if where else key)
        return out
    if recorded == now:
        return []
    return [f"{where}: {short(recorded)} then, {short(now)} now"]


ABSENT = "(absent)"


def short(value) -> str:
    text = orjson.dumps(value, default=str).decode()
    return text if len(text) <= 120 else text[:117] + "..."


def write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
