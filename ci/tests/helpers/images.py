"""What the image test files share: the questions they ask about a photo and the vision demo's `blink serve`
command line. Imported as `helpers.images` (its `QUESTIONS` are the image tests' own, not every test's)."""

from __future__ import annotations

from helpers.servers import blink_serve

QUESTIONS = {
    "red": {"type": "noul", "instructions": "Is the photo mostly red?"},
    "kind": {"type": "choice", "instructions": "What is it?", "criteria": {"parcel": None, "letter": None}},
}


def vision_serve(*flags: str) -> list[str]:
    argv = blink_serve("--vision", "1", *flags)
    argv[argv.index("demo")] = "demo-vision"
    return argv
