"""The command-line flags of blink/settings.py's knobs: one flag per knob, each defaulting to its `BLINK_<NAME>`
variable and checked by the knob's own parser (`serve`, `run-batch`)."""

from __future__ import annotations

import argparse
import os

from blink.errors import StartupError
from blink.settings import BadSetting, Settings, knobs


class FromEnv(str):
    """A flag's default read from its variable: argparse parses it only when the command runs, and a refusal
    names the variable."""

    env = ""


def add_arguments(parser: argparse.ArgumentParser, schema=Settings) -> None:
    """One flag per knob; each defaults to its BLINK_* variable (checked by the same parser)."""
    for k in knobs(schema):
        default = k.default
        if k.env in os.environ:
            default = FromEnv(os.environ[k.env])
            default.env = k.env
        shown = k.shown or ("—" if k.default is None else k.default)
        parser.add_argument(
            k.flag, dest=k.name, type=for_argparse(k.parse), default=default, help=f"{k.doc} [{k.env}; default {shown}]"
        )


def for_argparse(parse):
    """argparse shows an ArgumentTypeError's own message (a ValueError's it replaces with 'invalid value')."""

    def checked(value):
        try:
            return parse(str(value) if isinstance(value, FromEnv) else value)
        except ValueError as exc:
            source = f"{value.env}={str(value)!r}: " if isinstance(value, FromEnv) else ""
            raise argparse.ArgumentTypeError(source + str(exc)) from None

    checked.__name__ = getattr(parse, "__name__", type(parse).__name__)
    return checked


def from_args(args: argparse.Namespace, schema=Settings):
    try:
        return schema(**{k.name: getattr(args, k.name) for k in knobs(schema)})
    except BadSetting as exc:
        raise StartupError(f"--{exc.name.replace('_', '-')}: {exc}") from None
