"""The knob tables of docs/configuration.md, generated from the schemas between markers (`python build.py --docs`
rewrites them; a test fails when they drift): the serve flags, the Space-only knobs, and spaces.toml's keys."""

from __future__ import annotations

import re

from blink.moderation_policy import PolicyFile
from blink.settings import (
    Choice,
    Integer,
    Knob,
    Listen,
    Number,
    Settings,
    SpaceSettings,
    flag,
    knobs,
    networks,
    urls,
)

from .schema import FLEET_ONLY, FLEET_TABLE, KNOBS_AT, LOCATIONS, NAMED_AFTER_SPACE, REQUIRED, REQUIRED_KNOBS


def values_of(k: Knob, toml: bool = False) -> str:
    if isinstance(k.parse, (Integer, Number, Choice, PolicyFile)):
        return str(k.parse)
    if k.parse is flag:
        return "true / false" if toml else "0 / 1"
    if k.parse is urls:
        return "list of http(s) URLs" if toml else "http(s) URLs, comma-separated"
    if k.parse is networks:
        return "list of IP addresses or CIDR networks" if toml else "IP addresses or CIDR networks, comma-separated"
    if isinstance(k.default, tuple):
        return "list of strings" if toml else "names, comma-separated"
    return "string" if toml else "text"


def env_default(k: Knob, value) -> str:
    if k.shown:
        return k.shown
    if value is None or value == () or value == "":
        return "—"
    if isinstance(value, bool):
        return f"`{int(value)}`"
    return f"`{value:g}`" if isinstance(value, float) else f"`{value}`"


def toml_default(value) -> str:
    if value is REQUIRED:
        return "required"
    if value is None or value == "":
        return "none"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, tuple):
        return "`[]`" if not value else f"`{list(value)}`"
    if isinstance(value, str):
        return f'`"{value}"`'
    return f"`{value:g}`" if isinstance(value, float) else f"`{value}`"


def serve_table() -> list[str]:
    rows = ["| flag | env | default | values | meaning |", "|---|---|---|---|---|"]
    for schema in (Listen, Settings):
        rows += [
            f"| `{k.flag}` | `{k.env}` | {env_default(k, k.default)} | {values_of(k)} | {k.doc} |"
            for k in knobs(schema)
        ]
    return rows


def space_table() -> list[str]:
    rows = ["| env | `spaces.toml` | default | values | meaning |", "|---|---|---|---|---|"]
    rows += [
        f"| `{k.env}` | `{k.fleet}` | {env_default(k, k.default)} | {values_of(k)} | {k.doc} |"
        for k in knobs(SpaceSettings)
    ]
    return rows


def fleet_table() -> list[str]:
    rows = ["| table | key | default | values | meaning |", "|---|---|---|---|---|"]
    for i, (key, spec) in enumerate(FLEET_TABLE.items()):
        rows.append(f"| {'`[fleet]`' if i == 0 else ''} | `{key}` | {toml_default(spec.default)} | | {spec.doc} |")
    shown_table = None
    for location in sorted(
        LOCATIONS,
        key=lambda loc: (loc.partition(".")[2] != "", loc.split(".")[0] if "." in loc else "", LOCATIONS.index(loc)),
    ):
        table, _, key = location.rpartition(".")
        label = f"`.{table}`" if table else "`[spaces.<name>]`"
        cell, shown_table = ("" if label == shown_table else label), label
        if location in FLEET_ONLY:
            spec = FLEET_ONLY[location]
            rows.append(f"| {cell} | `{key}` | {toml_default(spec.default)} | | {spec.doc} (fleet only) |")
            continue
        k = KNOBS_AT[location]
        default = (
            "required"
            if k.name in REQUIRED_KNOBS
            else "the Space name"
            if k.name in NAMED_AFTER_SPACE
            else k.shown
            if k.shown and k.space_default is None
            else toml_default(k.space_default)
        )
        rows.append(f"| {cell} | `{key}` | {default} | {values_of(k, toml=True)} | {k.doc} (`{k.env}`) |")
    return rows


TABLES = {"SERVE-FLAGS": serve_table, "SPACE-KNOBS": space_table, "FLEET-KEYS": fleet_table}
PAGE = "docs/configuration.md"  # the page that holds the tables, from the repository root


def with_tables(text: str, page: str = PAGE) -> str:
    """The page with every generated table rewritten between its markers (each must be present once)."""
    for name, rows in TABLES.items():
        pattern = re.compile(rf"(<!-- {name}:START[^>]*-->\n).*?(<!-- {name}:END -->)", re.S)
        if len(pattern.findall(text)) != 1:
            raise ValueError(f"{page}: expected one <!-- {name}:START --> ... <!-- {name}:END --> block")
        table = "\n".join(rows()) + "\n"
        text = pattern.sub(lambda m, table=table: m.group(1) + table + m.group(2), text)
    return text
