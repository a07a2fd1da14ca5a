"""spaces.toml, checked: every key is a knob of blink/settings.py (checked by its own parser and bounds, plus the
Hub's forms for names and revisions) or one of the fleet-only keys below (the Hub card, the push). Anything else
is refused, naming the Space and the key.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from blink.moderation_policy import load_policy
from blink.settings import BadSetting, Integer, Knob, Number, Settings, SpaceSettings, flag, knobs

from . import ROOT, ConfigError
from .pins import check_requirements

# --- value checks: each takes the TOML value and returns it, or raises ValueError(why) -------------------------

REPO_PART = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?")
HEX40 = re.compile(r"[0-9a-f]{40}")


def text(value, *, max_len: int | None = None, one_line: bool = False) -> str:
    if not isinstance(value, str):
        raise ValueError(f"must be a string, got {type(value).__name__}")
    value = value.strip()
    if not value:
        raise ValueError("must not be empty")
    if one_line and "\n" in value:
        raise ValueError("must be one line")
    if max_len is not None and len(value) > max_len:
        raise ValueError(f"must be at most {max_len} characters, got {len(value)}")
    return value


def repo_name(value) -> str:
    value = text(value)
    if not REPO_PART.fullmatch(value) or "--" in value or ".." in value or value.endswith(".git"):
        raise ValueError(f"{value!r} is not a valid Hub repo name (letters, digits, '-', '_', '.'; at most 96)")
    return value


def repo_id(value) -> str:
    value = text(value)
    owner, slash, name = value.partition("/")
    if not slash:
        raise ValueError(f"{value!r} is not a Hub repo id: use owner/name")
    try:
        repo_name(owner), repo_name(name)
    except ValueError:
        raise ValueError(f"{value!r} is not a Hub repo id: use owner/name (letters, digits, '-', '_', '.')") from None
    return value


def revision(value) -> str:
    """A branch, a tag (`refs/pr/N` too) or a full 40-hex commit, as the Hub resolves it."""
    if not isinstance(value, str):
        raise ValueError(f"must be a string (a tag, branch or 40-hex commit), got {type(value).__name__}")
    if not value.strip():
        raise ValueError("must not be empty: pin a tag, branch or 40-hex commit")
    if HEX40.fullmatch(value):
        return value
    if re.fullmatch(r"[0-9a-fA-F]{40}", value):
        raise ValueError(f"{value!r}: write a commit in lowercase hex")
    if re.fullmatch(r"[0-9a-fA-F]{7,39}", value) and re.search(r"[0-9]", value) and re.search(r"[a-fA-F]", value):
        raise ValueError(f"{value!r} looks like an abbreviated commit: the Hub needs all 40 hex digits")
    if not re.fullmatch(r"[A-Za-z0-9._/+-]+", value):
        raise ValueError(
            f"{value!r} is not a tag, branch or commit: use letters, digits, '.', '_', '-', '+', '/' (no spaces)"
        )
    if (
        value.startswith(("-", "/", "."))
        or value.endswith(("/", ".", ".lock"))
        or ".." in value
        or "//" in value
        or "/." in value
    ):
        raise ValueError(f"{value!r} is not a valid git ref name")
    return value


def tower(value) -> str:
    value = text(value)
    repo, at, rev = value.rpartition("@")
    if not at:
        raise ValueError(f"{value!r}: write repo@revision")
    try:
        repo_id(repo)
        revision(rev)
    except ValueError as exc:
        raise ValueError(f"{value!r}: {exc}") from None
    return value


def boolean(value) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false, got {value!r}")
    return value


def choice(options):
    def check(value):
        if value not in options:
            raise ValueError(f"must be one of {', '.join(map(str, options))}; got {value!r}")
        return value

    return check


def string_list(item_check):
    def check(value) -> tuple:
        if not isinstance(value, list):
            raise ValueError(f"must be a list of strings, got {type(value).__name__}")
        out = []
        for i, item in enumerate(value):
            try:
                out.append(item_check(item))
            except ValueError as exc:
                raise ValueError(f"item {i}: {exc}") from None
        if len(set(out)) != len(out):
            raise ValueError("has duplicates")
        return tuple(out)

    return check


def name_text(value) -> str:
    value = text(value, max_len=128, one_line=True)
    if any(c.isspace() for c in value):
        raise ValueError(f"{value!r} must not contain whitespace")
    return value


def emoji(value) -> str:
    value = text(value, max_len=8, one_line=True)
    if any(c.isascii() for c in value):
        raise ValueError(f"{value!r}: one emoji, nothing else")
    return value


def duration(value) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"[1-9][0-9]*[mh]", value):
        raise ValueError(f'{value!r}: write minutes or hours, e.g. "30m" or "1h"')
    return value


def env_name(value) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"[A-Z_][A-Z0-9_]*", value):
        raise ValueError(f"{value!r} is not an environment variable name (A-Z, 0-9, _)")
    return value


def shipped_policy(value) -> str:
    """A moderation policy a Space can read: a file under blink/policies/ (shipped with every Space), named by its
    path from the repository root, checked whole as the server checks it at start-up."""
    value = text(value, one_line=True)
    path = Path(value)
    if path.is_absolute() or path.parts[:2] != ("blink", "policies") or ".." in path.parts:
        raise ValueError(f"{value!r}: put the policy under blink/policies/ (shipped with every Space) and name it so")
    load_policy(ROOT / path)
    return value


# files the Space reads from its own folder: checked from the repository's root, kept as written
FILE_FORM = {"moderation.policy": shipped_policy}


# --- the schema ----------------------------------------------------------------------------------------------

REQUIRED = object()
HARDWARE = {"zerogpu": "zero-a10g"}  # spaces.toml name -> Hub flavour (ZeroGPU is still "zero-a10g")
COLORS = ("red", "yellow", "green", "blue", "indigo", "purple", "pink", "gray")
PYTHON_VERSIONS = ("3.10", "3.12", "3.10.13", "3.12.12")  # the Pythons ZeroGPU lists
SHORT_DESCRIPTION_MAX = 60  # the Hub refuses longer


@dataclass(frozen=True)
class FleetKey:
    """A key only the fleet reads (the Hub card, the push): it never reaches the app."""

    check: object
    default: object
    doc: str


FLEET_ONLY = {
    "emoji": FleetKey(emoji, "⚡", "the Hub card's emoji"),
    "color_from": FleetKey(choice(COLORS), "indigo", "the Hub card's gradient: " + ", ".join(COLORS)),
    "color_to": FleetKey(choice(COLORS), "blue", "... and its other end"),
    "short_description": FleetKey(
        lambda v: text(v, max_len=SHORT_DESCRIPTION_MAX, one_line=True),
        REQUIRED,
        f"the Hub card's line (at most {SHORT_DESCRIPTION_MAX} characters)",
    ),
    "tags": FleetKey(string_list(name_text), (), "Hub tags"),
    "license": FleetKey(name_text, None, "Hub license id"),
    "private": FleetKey(boolean, False, "a private Space"),
    "api_key_secret": FleetKey(
        env_name, "BLINK_API_KEY", "the local variable --push sets as the Space's BLINK_API_KEY secret (when it is set)"
    ),
    "startup_duration_timeout": FleetKey(duration, "1h", "how long the Hub waits for start-up, e.g. 30m"),
    "preload_files": FleetKey(
        string_list(lambda v: text(v, one_line=True)),
        (),
        "files of `model` preloaded at build (pinned only when `revision` is a 40-hex commit)",
    ),
    "hardware.type": FleetKey(choice(tuple(HARDWARE)), "zerogpu", "the Space's hardware"),
}
FLEET_TABLE = {
    "owner": FleetKey(repo_name, None, "the Hub user or organization (--push OWNER overrides)"),
    "python_version": FleetKey(choice(PYTHON_VERSIONS), "3.12", "the Space's Python: " + ", ".join(PYTHON_VERSIONS)),
}
# the Hub's own forms, checked before the knob's parser
HUB_FORM = {
    "model": repo_id,
    "revision": revision,
    "adapter": repo_id,
    "adapter_revision": revision,
    "served_model_name": name_text,
    "model_aliases": string_list(name_text),
    "vision.tower": tower,
    "title": lambda v: text(v, max_len=80, one_line=True),
    "description": text,
    "caveat": text,
    "system_prompt": text,
}
REQUIRED_KNOBS = ("model", "revision", "description")
# knobs whose fleet default is the Space's name
NAMED_AFTER_SPACE = ("served_model_name", "title")
KNOBS_AT = {k.fleet: k for schema in (Settings, SpaceSettings) for k in knobs(schema) if k.fleet}
LOCATIONS = [*KNOBS_AT, *FLEET_ONLY]
SUBTABLES = tuple(dict.fromkeys(loc.split(".")[0] for loc in LOCATIONS if "." in loc))


@dataclass
class Space:
    name: str
    card: dict  # the fleet-only values by location, defaults filled
    settings: Settings
    space: SpaceSettings

    def __getattr__(self, key):
        """A card key or a server knob by name (`space.model`, `space.private`)."""
        settings = self.__dict__.get("settings")
        for source in (self.__dict__.get("card", {}), vars(settings) if settings else {}):
            if key in source:
                return source[key]
        raise AttributeError(key)

    @property
    def hardware(self) -> dict:
        return {"type": self.card["hardware.type"], "size": self.space.gpu_size}

    @property
    def flavor(self) -> str:
        return HARDWARE[self.card["hardware.type"]]


@dataclass
class Fleet:
    owner: str | None
    python_version: str
    spaces: list[Space]
    gradio: str  # the pinned Gradio = the README's sdk_version


def knob_value(knob: Knob, value):
    """A TOML value for a knob: the Hub's form where it has one, then the knob's own parser, no text for numbers."""
    if knob.fleet in FILE_FORM:
        return FILE_FORM[knob.fleet](value)
    if knob.fleet in HUB_FORM:
        value = HUB_FORM[knob.fleet](value)
    numeric = isinstance(knob.parse, (Integer, Number)) or knob.parse is flag
    if (
        isinstance(value, str)
        and numeric
        and not (isinstance(knob.parse, Number) and knob.parse.auto and value == "auto")
    ):
        raise ValueError(f"must be a {'boolean' if knob.parse is flag else 'number'}, got {value!r}")
    return knob.parse(value)


def flatten(where: str, table: dict) -> dict:
    """{"model": ..., "limits.max_questions": ...}; each key known, each sub-table a table."""
    out = {}
    for key, value in table.items():
        if key in SUBTABLES:
            if not isinstance(value, dict):
                raise ConfigError(where, key, "must be a table")
            known = [loc.split(".", 1)[1] for loc in LOCATIONS if loc.startswith(key + ".")]
            for sub, item in value.items():
                if sub not in known:
                    raise ConfigError(where, f"{key}.{sub}", f"unknown key (known: {', '.join(known)})")
                out[f"{key}.{sub}"] = item
        elif key in LOCATIONS:
            out[key] = value
        else:
            known = [loc for loc in LOCATIONS if "." not in loc] + [f"[{t}]" for t in SUBTABLES]
            raise ConfigError(where, key, f"unknown key (known: {', '.join(known)})")
    return out


def parse_space(name: str, table) -> Space:
    where = f"[spaces.{name}]"
    try:
        repo_name(name)
    except ValueError as exc:
        raise ConfigError(where, None, f"bad Space name: {exc}") from None
    if not isinstance(table, dict):
        raise ConfigError(where, None, "must be a table")
    given = flatten(where, table)
    card = _card(where, given)
    values = _knob_values(where, name, given)
    at = {k.name: location for location, k in KNOBS_AT.items()}
    try:
        settings = Settings(**{k.name: values.get(k.name, k.space_default) for k in knobs(Settings)})
        space = SpaceSettings(**{k.name: values[k.name] for k in knobs(SpaceSettings)})
    except BadSetting as exc:
        raise ConfigError(where, at[exc.name], str(exc)) from None
    _check_together(where, settings)
    return Space(name, card, settings, space)


def _card(where: str, given: dict) -> dict:
    """The fleet-only keys (the Hub card, the push), each checked or defaulted."""
    card = {}
    for location, key in FLEET_ONLY.items():
        if location not in given:
            if key.default is REQUIRED:
                raise ConfigError(where, location, "required")
            card[location] = key.default
            continue
        try:
            card[location] = key.check(given[location])
        except ValueError as exc:
            raise ConfigError(where, location, str(exc)) from None
    return card


def _knob_values(where: str, name: str, given: dict) -> dict:
    """The settings' values by knob name: each given one checked, the others the Space's defaults."""
    values = {}
    for location, knob in KNOBS_AT.items():
        if location not in given:
            if knob.name in REQUIRED_KNOBS:
                raise ConfigError(where, location, "required")
            values[knob.name] = name if knob.name in NAMED_AFTER_SPACE else knob.space_default
            continue
        try:
            values[knob.name] = knob_value(knob, given[location])
        except ValueError as exc:
            raise ConfigError(where, location, str(exc)) from None
    return values


def _check_together(where: str, settings: Settings) -> None:
    """The settings that are only valid with (or without) another."""
    if settings.adapter and not settings.adapter_revision:
        raise ConfigError(where, "adapter_revision", "required with adapter: pin a tag, branch or 40-hex commit")
    if settings.adapter_revision and not settings.adapter:
        raise ConfigError(where, "adapter_revision", "given without adapter")
    if settings.vision_tower and not settings.vision:
        raise ConfigError(where, "vision.tower", "a vision tower needs vision.enabled = true")
    if settings.served_model_name in settings.model_aliases:
        raise ConfigError(where, "model_aliases", f"repeats served_model_name {settings.served_model_name!r}")


def check_fleet_table(table) -> dict:
    if not isinstance(table, dict):
        raise ConfigError("spaces.toml", "fleet", "must be a table")
    for key in table:
        if key not in FLEET_TABLE:
            raise ConfigError("[fleet]", key, f"unknown key (known: {', '.join(FLEET_TABLE)})")
    out = {}
    for key, spec in FLEET_TABLE.items():
        try:
            out[key] = spec.check(table[key]) if key in table else spec.default
        except ValueError as exc:
            raise ConfigError("[fleet]", key, str(exc)) from None
    return out


def load(config: Path = ROOT / "spaces.toml", owner: str | None = None, only: list[str] | None = None) -> Fleet:
    where = config.name
    try:
        data = tomllib.loads(config.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(where, None, "not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(where, None, f"not valid TOML: {exc}") from None
    for key in data:
        if key not in ("fleet", "spaces"):
            raise ConfigError(where, key, "unknown top-level key (use [fleet] and [spaces.<name>])")
    fleet = check_fleet_table(data.get("fleet", {}))
    tables = data.get("spaces")
    if not isinstance(tables, dict) or not tables:
        raise ConfigError(where, "spaces", "no Spaces: add a [spaces.<name>] table")
    spaces = [parse_space(name, table) for name, table in tables.items()]
    if only:
        unknown = sorted(set(only) - set(tables))
        if unknown:
            raise ConfigError(where, None, f"no such Space: {', '.join(unknown)}")
        spaces = [s for s in spaces if s.name in only]
    if owner is not None:
        try:
            owner = repo_name(owner)
        except ValueError as exc:
            raise ConfigError("--push/--owner", None, str(exc)) from None
    return Fleet(owner or fleet["owner"], fleet["python_version"], spaces, check_requirements())
