"""The fleet builder behind `python build.py`: spaces.toml checked (`schema`), each Space's files rendered
(`render`), the pins checked (`pins`), the README's knob tables generated (`docs`) and the Hub updated (`hub`).

Light on purpose: the standard library and blink's settings schema only (no torch, transformers or Pillow).
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


class ConfigError(Exception):
    """A bad value in spaces.toml (or a missing shared file); the message names the Space and the key."""

    def __init__(self, where: str, key: str | None, message: str):
        self.where, self.key = where, key
        super().__init__(f"{where} {key}: {message}" if key else f"{where}: {message}")
