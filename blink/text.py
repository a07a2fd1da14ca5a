"""Text helpers shared by the decode loop (stop strings) and the tool-call parser (call markers)."""

from __future__ import annotations


def partial_marker_length(text: str, markers) -> int:
    """How many trailing characters of `text` could be the start of one of `markers`: text a stream must
    hold back until the next piece says whether a marker (a tool-call tag, a stop string) is coming."""
    keep = 0
    for marker in markers:
        for n in range(min(len(marker) - 1, len(text)), keep, -1):
            if text.endswith(marker[:n]):
                keep = n
                break
    return keep
