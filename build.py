#!/usr/bin/env python3
"""The fleet: one app, many Hugging Face ZeroGPU Spaces; the only per-Space difference is its config.

    python build.py                      build dist/<space>/ for every Space in spaces.toml
    python build.py --space blink-4b     only that Space (repeatable)
    python build.py --check              validate spaces.toml, the shared files and the pins; write nothing
    python build.py --dry-run            print what --push would do (repo, hardware, secrets by name, files)
    python build.py --push OWNER         build, then create or update OWNER/<space> on the Hub

Each `dist/<space>/` is uploadable as it is: `app.py`, `ui.py`, `ui_form.py`, `theme.py`, `zerogpu.py`, `blink/`
and `requirements.txt` copied byte for byte from the repository root, plus `space_config.py` (that Space's
table as Python constants, the names `app.py` reads) and `README.md` (the YAML front matter the Hub
reads, and a body that tells a visitor how to call the Space).

Exit status: 0 ok, 2 a configuration error (the message names the Space and the key), 1 a push failure.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import sys
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from blink.settings import KNOBS  # noqa: E402  (stdlib-only module: the same checks the app applies)

SHARED_FILES = ("app.py", "ui.py", "ui_form.py", "theme.py", "zerogpu.py", "requirements.txt")
SHARED_DIRS = ("blink",)
GENERATED = ("space_config.py", "README.md")
CPU_REQUIREMENTS = ROOT / "ci" / "requirements.txt"
GPU_REQUIREMENTS = ROOT / "requirements.txt"

HARDWARE = {"zerogpu": "zero-a10g"}  # spaces.toml name -> Hub flavour (ZeroGPU is still "zero-a10g")
GPU_SIZES = ("large", "xlarge")
ZEROGPU_TORCH = ("2.8.0", "2.9.1", "2.10.0", "2.11.0")  # the torch versions ZeroGPU lists
TORCHVISION_FOR = {"2.8.0": "0.23.0", "2.9.1": "0.24.1", "2.10.0": "0.25.0", "2.11.0": "0.26.0"}
PYTHON_VERSIONS = ("3.10", "3.12", "3.10.13", "3.12.12")  # the Pythons ZeroGPU lists
IMAGE_LAYOUTS = ("inline", "first")
COLORS = ("red", "yellow", "green", "blue", "indigo", "purple", "pink", "gray")
SHORT_DESCRIPTION_MAX = 60  # the Hub refuses longer
SERVING_KNOBS = ("model", "revision", "adapter", "adapter_revision", "served_model_name", "model_aliases",
                 "api_key")
LIMIT_KNOBS = {name: (kind, default) for name, kind, default, _ in KNOBS if name not in SERVING_KNOBS}


class ConfigError(Exception):
    """A bad value in spaces.toml (or a missing shared file); the message names the Space and the key."""

    def __init__(self, where: str, key: str | None, message: str):
        self.where, self.key = where, key
        super().__init__(f"{where} {key}: {message}" if key else f"{where}: {message}")


# ----------------------------------------------------------------------------------------------------
# value checks: each takes the TOML value and returns the Python value, or raises ValueError(why)

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
        raise ValueError(f"{value!r} is not a Hub repo id: use owner/name "
                         "(letters, digits, '-', '_', '.')") from None
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
        raise ValueError(f"{value!r} is not a tag, branch or commit: use letters, digits, '.', '_', '-', '+', '/' "
                         "(no spaces)")
    if (value.startswith(("-", "/", ".")) or value.endswith(("/", ".", ".lock")) or ".." in value
            or "//" in value or "/." in value):
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
        raise ValueError(f"{value!r}: write minutes or hours, e.g. \"30m\" or \"1h\"")
    return value


def env_name(value) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"[A-Z_][A-Z0-9_]*", value):
        raise ValueError(f"{value!r} is not an environment variable name (A-Z, 0-9, _)")
    return value


def knob(name: str):
    """A serving limit, checked by the same parser `python -m blink serve` and the Space use."""
    kind, default = LIMIT_KNOBS[name]
    integral = isinstance(default, int)

    def check(value):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"must be a number, got {value!r}")
        if integral and not isinstance(value, int):
            raise ValueError(f"must be an integer, got {value!r}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"must be finite, got {value!r}")
        try:
            parsed = kind(value)
        except argparse.ArgumentTypeError as exc:
            raise ValueError(str(exc)) from None
        return parsed if integral else (int(parsed) if float(parsed).is_integer() else parsed)

    return check


def template_value(value):
    if isinstance(value, (bool, int, float, str)):
        return value
    raise ValueError(f"must be a string, number or boolean, got {type(value).__name__}")


def int_in(lo: int, hi: int):
    def check(value) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise ValueError(f"must be a whole number {lo}-{hi}; got {value!r}")
        return value

    return check


def non_negative(hi: float):
    def check(value) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 <= value <= hi):
            raise ValueError(f"must be a number from 0 to {hi}; got {value!r}")
        return value

    return check


def positive(hi: float):
    def check(value) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 < value <= hi):
            raise ValueError(f"must be a number above 0, at most {hi}; got {value!r}")
        return value

    return check


# ----------------------------------------------------------------------------------------------------
# the schema: table -> key -> (check, default). REQUIRED has no default. None means "not set".

REQUIRED = object()

SPACE_KEYS = {
    "model": (repo_id, REQUIRED),
    "revision": (revision, REQUIRED),
    "adapter": (repo_id, None),
    "adapter_revision": (revision, None),
    "served_model_name": (name_text, None),  # default: the Space name
    "model_aliases": (string_list(name_text), ()),
    "title": (lambda v: text(v, max_len=80, one_line=True), None),  # default: the Space name
    "emoji": (emoji, "⚡"),
    "color_from": (choice(COLORS), "indigo"),
    "color_to": (choice(COLORS), "blue"),
    "short_description": (lambda v: text(v, max_len=SHORT_DESCRIPTION_MAX, one_line=True), REQUIRED),
    "description": (text, REQUIRED),
    "caveat": (text, None),
    "system_prompt": (text, None),
    "tags": (string_list(name_text), ()),
    "license": (name_text, None),
    "private": (boolean, False),
    "api_key_secret": (env_name, "BLINK_API_KEY"),
    "startup_duration_timeout": (duration, "1h"),
    "preload_files": (string_list(lambda v: text(v, one_line=True)), ()),
}
VISION_KEYS = {
    "enabled": (boolean, False),
    "tower": (tower, None),
    "image_layout": (choice(IMAGE_LAYOUTS), None),  # None: the engine's default
}
# GPU seconds each call requests: estimated from its token counts (blink/durations.py), clamped to bounds
HARDWARE_KEYS = {
    "type": (choice(tuple(HARDWARE)), "zerogpu"),
    "size": (choice(GPU_SIZES), "large"),
    "duration_min_s": (int_in(1, 600), 2),
    "duration_max_s": (int_in(1, 600), 60),  # decisions
    "chat_duration_max_s": (int_in(1, 600), 120),  # chat turns
    "duration_cold_s": (non_negative(600), 30.0),  # the first call, and the one after a failed call
    "duration_overhead_s": (non_negative(600), 0.0),
    "duration_headroom": (positive(100), 1.3),
    "prefill_s_per_token": (positive(10), 1e-3),  # the prior, until the Space's own calls calibrate it
    "decode_s_per_token": (positive(10), 0.08),
}
LIMIT_KEYS = {name: (knob(name), default) for name, (_, default) in LIMIT_KNOBS.items()}
LIMIT_KEYS.update({
    "max_output_tokens": (int_in(1, 262144), 1024),  # per chat turn (a request's max_tokens is clamped to it)
    "ui_chat_max_tokens": (int_in(1, 262144), 512),  # the Chat tab's turns
    "queue_max_size": (int_in(1, 10000), 64),  # Gradio's queue (UI events)
    "queue_concurrency": (int_in(1, 64), 8),
})
SUBTABLES = {"vision": VISION_KEYS, "limits": LIMIT_KEYS, "hardware": HARDWARE_KEYS, "chat_template": None}
FLEET_KEYS = {
    "owner": (repo_name, None),
    "python_version": (choice(PYTHON_VERSIONS), "3.12"),
}


@dataclass
class Space:
    name: str
    values: dict  # top-level keys, checked, defaults filled
    vision: dict
    limits: dict
    hardware: dict
    chat_template: dict = field(default_factory=dict)

    def __getattr__(self, key):
        try:
            return self.__dict__["values"][key]
        except KeyError:
            raise AttributeError(key) from None

    @property
    def flavor(self) -> str:
        return HARDWARE[self.hardware["type"]]


@dataclass
class Fleet:
    owner: str | None
    python_version: str
    spaces: list[Space]
    gradio: str  # the pinned Gradio = the README's sdk_version


def check_table(where: str, table: dict, schema: dict, prefix: str = "") -> dict:
    out = {}
    for key in table:
        if key not in schema:
            known = ", ".join(schema)
            raise ConfigError(where, prefix + key, f"unknown key (known: {known})")
    for key, (check, default) in schema.items():
        if key in table:
            try:
                out[key] = check(table[key])
            except ValueError as exc:
                raise ConfigError(where, prefix + key, str(exc)) from None
        elif default is REQUIRED:
            raise ConfigError(where, prefix + key, "required")
        else:
            out[key] = default
    return out


def parse_space(name: str, table) -> Space:
    where = f"[spaces.{name}]"
    try:
        repo_name(name)
    except ValueError as exc:
        raise ConfigError(where, None, f"bad Space name: {exc}") from None
    if not isinstance(table, dict):
        raise ConfigError(where, None, "must be a table")
    top = {k: v for k, v in table.items() if k not in SUBTABLES}
    values = check_table(where, top, SPACE_KEYS)
    parts = {}
    for sub, schema in SUBTABLES.items():
        raw = table.get(sub, {})
        if not isinstance(raw, dict):
            raise ConfigError(where, sub, "must be a table")
        if schema is None:  # free-form: chat template keyword arguments
            for key, value in raw.items():
                try:
                    template_value(value)
                except ValueError as exc:
                    raise ConfigError(where, f"{sub}.{key}", str(exc)) from None
            parts[sub] = dict(raw)
        else:
            parts[sub] = check_table(where, raw, schema, prefix=sub + ".")
    if values["adapter"] and not values["adapter_revision"]:
        raise ConfigError(where, "adapter_revision", "required with adapter: pin a tag, branch or 40-hex commit")
    if values["adapter_revision"] and not values["adapter"]:
        raise ConfigError(where, "adapter_revision", "given without adapter")
    if parts["vision"]["tower"] and not parts["vision"]["enabled"]:
        raise ConfigError(where, "vision.tower", "a vision tower needs vision.enabled = true")
    hw = parts["hardware"]
    for cap in ("duration_max_s", "chat_duration_max_s"):
        if hw["duration_min_s"] > hw[cap]:
            raise ConfigError(where, "hardware.duration_min_s",
                              f"{hw['duration_min_s']} is above hardware.{cap} ({hw[cap]})")
    values["served_model_name"] = values["served_model_name"] or name
    values["title"] = values["title"] or name
    if values["served_model_name"] in values["model_aliases"]:
        raise ConfigError(where, "model_aliases", f"repeats served_model_name {values['served_model_name']!r}")
    return Space(name, values, parts["vision"], parts["limits"], hw, parts["chat_template"])


def read_pins(path: Path) -> dict[str, str]:
    """name -> version for every `name==version` line (names normalised as pip does)."""
    pins = {}
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*==\s*([^\s;]+)", line)
        if not m:
            raise ConfigError(path.name, line, "not pinned with ==")
        pins[re.sub(r"[-_.]+", "-", m.group(1)).lower()] = m.group(3)
    return pins


def check_requirements() -> str:
    """Both requirement files pinned, shared pins equal, torch on ZeroGPU's list; returns the Gradio pin."""
    for path in (GPU_REQUIREMENTS, CPU_REQUIREMENTS):
        if not path.is_file():
            raise ConfigError(str(path.relative_to(ROOT)), None, "missing")
    gpu, cpu = read_pins(GPU_REQUIREMENTS), read_pins(CPU_REQUIREMENTS)
    for name in sorted(set(gpu) & set(cpu)):
        if gpu[name] != cpu[name]:
            raise ConfigError("requirements.txt", name,
                              f"=={gpu[name]} disagrees with ci/requirements.txt =={cpu[name]}")
    if "gradio" not in cpu:
        raise ConfigError("ci/requirements.txt", "gradio", "not pinned (the Spaces' sdk_version comes from it)")
    if "gradio" in gpu:
        raise ConfigError("requirements.txt", "gradio", "leave gradio out: the README's sdk_version installs it")
    if gpu.get("torch") not in ZEROGPU_TORCH:
        raise ConfigError("requirements.txt", "torch",
                          f"=={gpu.get('torch')} is not a ZeroGPU torch ({', '.join(ZEROGPU_TORCH)})")
    if "torchvision" in gpu and gpu["torchvision"] != TORCHVISION_FOR[gpu["torch"]]:
        raise ConfigError("requirements.txt", "torchvision",
                          f"=={gpu['torchvision']} does not match torch=={gpu['torch']} "
                          f"(use =={TORCHVISION_FOR[gpu['torch']]})")
    if "fla-core" in gpu and gpu["fla-core"] != gpu.get("flash-linear-attention"):
        raise ConfigError("requirements.txt", "fla-core", "must equal the flash-linear-attention version")
    for name in ("spaces", "transformers", "flash-linear-attention", "peft", "safetensors", "huggingface-hub",
                 "fastapi", "uvicorn"):
        if name not in gpu:
            raise ConfigError("requirements.txt", name, "missing")
    return cpu["gradio"]


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
    fleet_table = data.get("fleet", {})
    if not isinstance(fleet_table, dict):
        raise ConfigError(where, "fleet", "must be a table")
    fleet = check_table("[fleet]", fleet_table, FLEET_KEYS)
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


# ----------------------------------------------------------------------------------------------------
# rendering

def host(owner: str, name: str) -> str:
    """The Space's subdomain as the Hub forms it (owner-name, lowercase, '.' and '_' as '-')."""
    return re.sub(r"[._]", "-", f"{owner}-{name}").lower() + ".hf.space"


def space_config(space: Space) -> str:
    v, vision, hw = space.values, space.vision, space.hardware
    consts = [
        ("SPACE", space.name, "the Space (and dist/ folder) this config was built for"),
        ("MODEL", v["model"], "Hub repo of the weights"),
        ("REVISION", v["revision"], "tag, branch or commit of MODEL"),
        ("ADAPTER", v["adapter"], "LoRA adapter merged into MODEL on CPU (None: none)"),
        ("ADAPTER_REVISION", v["adapter_revision"], None),
        ("SERVED_MODEL_NAME", v["served_model_name"], "the name answers and /v1/models carry"),
        ("MODEL_ALIASES", tuple(v["model_aliases"]), "extra names listed in /v1/models"),
        ("API_KEY", None, f"never stored here: set the Space secret BLINK_API_KEY"),
    ]
    consts += [(name.upper(), space.limits[name], None) for name in LIMIT_KNOBS]
    consts += [
        ("TITLE", v["title"], None),
        ("DESCRIPTION", v["description"], None),
        ("CAVEAT", v["caveat"], "shown in the UI (None: no caveat)"),
        ("SYSTEM_PROMPT", v["system_prompt"], "prepended when a conversation has no system message"),
        ("CHAT_TEMPLATE_KWARGS", dict(space.chat_template), "keyword arguments for the chat template"),
        ("MAX_OUTPUT_TOKENS", space.limits["max_output_tokens"], "per chat turn"),
        ("UI_CHAT_MAX_TOKENS", space.limits["ui_chat_max_tokens"], "the Chat tab's turns"),
        ("VISION", vision["enabled"], "accept images"),
        ("VISION_TOWER", vision["tower"], "repo@revision of a vision tower for a text model (None: the model's own)"),
        ("IMAGE_LAYOUT", vision["image_layout"], "inline | first (None: the engine's default)"),
        ("GPU_SIZE", hw["size"], "large (half a GPU, 1x quota) or xlarge (a whole GPU, 2x quota)"),
        ("DURATION_MIN_S", hw["duration_min_s"], "GPU seconds a call requests, clamped to these bounds"),
        ("DURATION_MAX_S", hw["duration_max_s"], "decisions"),
        ("CHAT_DURATION_MAX_S", hw["chat_duration_max_s"], "chat turns"),
        ("DURATION_COLD_S", hw["duration_cold_s"], "a fresh worker moves the weights and compiles kernels first"),
        ("DURATION_OVERHEAD_S", hw["duration_overhead_s"], None),
        ("DURATION_HEADROOM", hw["duration_headroom"], None),
        ("PREFILL_S_PER_TOKEN", hw["prefill_s_per_token"], "the prior until the Space's calls calibrate it"),
        ("DECODE_S_PER_TOKEN", hw["decode_s_per_token"], None),
        ("QUEUE_MAX_SIZE", space.limits["queue_max_size"], "Gradio's queue (UI events)"),
        ("QUEUE_CONCURRENCY", space.limits["queue_concurrency"], None),
    ]
    lines = [
        f'"""What the Space `{space.name}` serves and its limits.',
        "",
        f"Generated by build.py from spaces.toml [spaces.{space.name}]: edit that table, not this file.",
        "Every serving value can be overridden by its BLINK_<NAME> environment variable.",
        '"""',
        "",
    ]
    for name, value, comment in consts:
        lines.append(f"{name} = {value!r}" + (f"  # {comment}" if comment else ""))
    return "\n".join(lines) + "\n"


def yaml_scalar(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return json.dumps(str(value), ensure_ascii=False)  # a JSON string is a YAML double-quoted scalar


def front_matter(space: Space, fleet: Fleet) -> dict:
    v = space.values
    models = [v["model"]] + ([v["adapter"]] if v["adapter"] else [])
    if space.vision["tower"]:
        models.append(space.vision["tower"].rpartition("@")[0])
    preload = []
    for repo, rev, files in ((v["model"], v["revision"], v["preload_files"]),
                             (v["adapter"], v["adapter_revision"], ())):
        if not repo:
            continue
        entry = repo
        if files:
            entry += " " + ",".join(files)
            if HEX40.fullmatch(rev):
                entry += " " + rev  # "repo files commit": the Hub pins preloads by commit only
        preload.append(entry)
    meta = {
        "title": v["title"],
        "emoji": v["emoji"],
        "colorFrom": v["color_from"],
        "colorTo": v["color_to"],
        "sdk": "gradio",
        "sdk_version": fleet.gradio,
        "python_version": fleet.python_version,
        "app_file": "app.py",
        "pinned": False,
        "short_description": v["short_description"],
        "models": list(dict.fromkeys(models)),
        "preload_from_hub": preload,
        "startup_duration_timeout": v["startup_duration_timeout"],
    }
    if v["license"]:
        meta["license"] = v["license"]
    if v["tags"]:
        meta["tags"] = list(v["tags"])
    return meta


def readme(space: Space, fleet: Fleet) -> str:
    v = space.values
    meta = front_matter(space, fleet)
    out = ["---"]
    for key, value in meta.items():
        if isinstance(value, list):
            out.append(f"{key}:")
            out += [f"  - {yaml_scalar(item)}" for item in value]
        else:
            out.append(f"{key}: {yaml_scalar(value)}")
    out.append("---")
    owner = fleet.owner or "OWNER"
    base = f"https://{host(owner, space.name)}"
    served = v["served_model_name"]
    model_link = f"[{v['model']}](https://huggingface.co/{v['model']}/tree/{v['revision']}) at `{v['revision']}`"
    if v["adapter"]:
        model_link += (f" with the LoRA adapter [{v['adapter']}](https://huggingface.co/{v['adapter']}/tree/"
                       f"{v['adapter_revision']}) at `{v['adapter_revision']}` merged in")
    names = ", ".join(f"`{n}`" for n in (served, *v["model_aliases"]))
    body = f"""
# {v['title']}

{v['description']}
"""
    if v["caveat"]:
        body += f"\n> **Caveat.** {v['caveat']}\n"
    body += f"""
Model: {model_link}, served as {names}. Runs on ZeroGPU (`{space.hardware['size']}`).
{"Images are accepted in requests." if space.vision["enabled"] else "Text only: requests with images are refused."}

## Call this Space

Base URL: `{base}` (this Space is `{owner}/{space.name}` on the Hub).

| Route | What |
|---|---|
| `POST /v1/systemone` | a decision: a state and typed questions (`noul`, `choice`, `score`), a probability for every option |
| `POST /v1/decisions` | the same decisions for OpenAI SDK users (`client.decisions.create`) |
| `POST /v1/chat/completions` | OpenAI chat completions (streaming too) |
| `GET /v1/models` | the served model names (TypeSafe and OpenAI shapes in one body) |
| `GET /healthz` | liveness and what is loaded |

A decision with curl:

```bash
curl -s {base}/v1/systemone -H 'Content-Type: application/json' \\
  -H "Authorization: Bearer $BLINK_API_KEY" \\
  -d '{{"model": "{served}", "state": "The parcel arrived two weeks late and the box was crushed.",
       "questions": {{"complaint": {{"type": "noul", "instructions": "Is this a complaint?"}},
                     "tone": {{"type": "choice", "criteria": {{"angry": null, "neutral": null, "happy": null}}}}}}}}'
```

With TypeSafe's SDKs: `TYPESAFE_BASE_URL={base}` (the host root, no `/v1`) and `model="{served}"`.

With the OpenAI Python SDK (chat):

```python
from openai import OpenAI

client = OpenAI(base_url="{base}/v1", api_key="<the key, or anything if the Space is open>")
reply = client.chat.completions.create(model="{served}", messages=[{{"role": "user", "content": "Hi"}}])
print(reply.choices[0].message.content)
```

Open WebUI: add an "OpenAI API" connection with URL `{base}/v1`.

If the owner set the `BLINK_API_KEY` secret, `/v1/*` needs `Authorization: Bearer <key>`; otherwise it is open.
A sleeping Space wakes on the first request, which can take a few minutes; the web UI at `{base}` shows when it is up.

## How this Space is built

This folder is generated by `python build.py` from the `[spaces.{space.name}]` table of `spaces.toml`:
`app.py`, `ui.py`, `ui_form.py`, `theme.py`, `zerogpu.py`, `blink/` and `requirements.txt` are the fleet's shared files,
copied unchanged; `space_config.py` holds this Space's settings (each overridable by its `BLINK_<NAME>` variable).
"""
    return "\n".join(out) + "\n" + body


# ----------------------------------------------------------------------------------------------------
# building

def shared_paths() -> list[tuple[Path, str]]:
    """(source, relative path) for every shared file; a missing one is an error."""
    out = []
    for name in SHARED_FILES:
        path = ROOT / name
        if not path.is_file():
            raise ConfigError(name, None, "shared file missing from the repository root (every Space needs it)")
        out.append((path, name))
    for name in SHARED_DIRS:
        folder = ROOT / name
        if not folder.is_dir():
            raise ConfigError(name + "/", None, "shared folder missing from the repository root")
        for path in sorted(folder.rglob("*")):
            rel = path.relative_to(ROOT)
            if path.is_file() and "__pycache__" not in rel.parts and path.suffix not in (".pyc", ".pyo"):
                out.append((path, rel.as_posix()))
    return out


def build_space(space: Space, fleet: Fleet, out: Path) -> list[str]:
    """Write the Space's folder at `out` (replacing it whole); return its files (relative, sorted)."""
    shared = shared_paths()
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{space.name}.", dir=out.parent))
    try:
        for src, rel in shared:
            dest = staging / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dest)
        (staging / "space_config.py").write_text(space_config(space), encoding="utf-8")
        (staging / "README.md").write_text(readme(space, fleet), encoding="utf-8")
        compile((staging / "space_config.py").read_text(encoding="utf-8"), "space_config.py", "exec")
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return files_of(out)


def files_of(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def verify_space(space: Space, fleet: Fleet, folder: Path) -> None:
    """The built folder: shared files byte-identical to the source, nothing else but the generated ones,
    a space_config.py the app accepts, a README whose front matter parses back to what was meant."""
    expected = {rel for _, rel in shared_paths()} | set(GENERATED)
    present = set(files_of(folder))
    if present != expected:
        raise ConfigError(f"dist/{space.name}", None,
                          f"unexpected files {sorted(present - expected)}, missing {sorted(expected - present)}")
    for src, rel in shared_paths():
        if (folder / rel).read_bytes() != src.read_bytes():
            raise ConfigError(f"dist/{space.name}", rel, "differs from the repository's copy")
    # space_config.py: a module of constants the app's own settings parser accepts
    namespace: dict = {}
    exec(compile((folder / "space_config.py").read_text(encoding="utf-8"), "space_config.py", "exec"), namespace)
    from blink.settings import Settings

    try:
        Settings.from_values({name: namespace[name.upper()] for name, *_ in KNOBS}, env={})
    except SystemExit as exc:
        raise ConfigError(f"[spaces.{space.name}]", None, f"the app would refuse this config: {exc}") from None
    # README.md: the front matter reads back as written (when PyYAML, which the Hub's parser matches, is here)
    try:
        import yaml
    except ImportError:
        return
    text = (folder / "README.md").read_text(encoding="utf-8")
    head = text.split("---\n", 2)[1] if text.startswith("---\n") else ""
    if yaml.safe_load(head) != front_matter(space, fleet):
        raise ConfigError(f"dist/{space.name}", "README.md", "front matter does not read back as written")


def build(fleet: Fleet, out: Path) -> dict[str, list[str]]:
    built = {}
    for space in fleet.spaces:
        built[space.name] = build_space(space, fleet, out / space.name)
        verify_space(space, fleet, out / space.name)
    return built


# ----------------------------------------------------------------------------------------------------
# pushing

def plan(space: Space, fleet: Fleet, files: list[str], env=None) -> list[str]:
    env = os.environ if env is None else env
    repo = f"{fleet.owner}/{space.name}"
    secret = space.api_key_secret
    has_key = bool(env.get(secret))
    lines = [
        f"Space {repo}",
        f"  url:      https://huggingface.co/spaces/{repo}  (app: https://{host(fleet.owner, space.name)})",
        f"  repo:     create or update {repo} (type space, sdk gradio, {'private' if space.private else 'public'})",
        f"  hardware: {space.flavor} (ZeroGPU, size {space.hardware['size']})",
        f"  preload:  {', '.join(front_matter(space, fleet)['preload_from_hub'])} (at build, README preload_from_hub)",
        f"  secrets:  BLINK_API_KEY " + (f"<- ${secret} (set)" if has_key else
                                          f"(${secret} not set: the Space's existing secret is left as it is)"),
        f"  upload:   {len(files)} files; remote files not among them are deleted",
    ]
    lines += [f"            {rel}" for rel in files]
    return lines


def push(fleet: Fleet, folders: dict[str, Path], api=None, env=None, echo=print) -> None:
    env = os.environ if env is None else env
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi()
    for space in fleet.spaces:
        repo = f"{fleet.owner}/{space.name}"
        folder = folders[space.name]
        echo(f"{repo}: create or update")
        api.create_repo(repo, repo_type="space", space_sdk="gradio", space_hardware=space.flavor,
                        private=space.private, exist_ok=True)
        runtime = api.get_space_runtime(repo)  # exist_ok leaves an existing Space's hardware as it was
        if space.flavor not in (runtime.hardware, runtime.requested_hardware):
            echo(f"{repo}: request hardware {space.flavor}")
            api.request_space_hardware(repo, space.flavor)
        key = env.get(space.api_key_secret)
        if key:
            echo(f"{repo}: secret BLINK_API_KEY (from ${space.api_key_secret})")
            api.add_space_secret(repo, "BLINK_API_KEY", key)
        echo(f"{repo}: upload {len(files_of(folder))} files, deleting stale ones")
        api.upload_folder(repo_id=repo, repo_type="space", folder_path=str(folder), delete_patterns=["*"],
                          commit_message=f"build.py: {space.name} ({space.model}@{space.revision})")
        echo(f"{repo}: done -> https://huggingface.co/spaces/{repo}")


# ----------------------------------------------------------------------------------------------------

def main(argv=None, api=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", type=Path, default=ROOT / "spaces.toml", help="the fleet file (spaces.toml)")
    ap.add_argument("--out", type=Path, default=ROOT / "dist", help="where the Space folders go (dist)")
    ap.add_argument("--space", action="append", metavar="NAME", help="only this Space (repeatable)")
    ap.add_argument("--owner", help="the Hub owner for URLs in the READMEs (default: [fleet] owner)")
    ap.add_argument("--check", action="store_true", help="validate everything, write nothing")
    ap.add_argument("--push", metavar="OWNER", help="build, then create or update OWNER/<space> on the Hub")
    ap.add_argument("--dry-run", action="store_true", help="print what --push would do, change nothing")
    a = ap.parse_args(argv)
    try:
        fleet = load(a.config, owner=a.push or a.owner, only=a.space)
        if (a.push or a.dry_run) and not fleet.owner:
            raise ConfigError("[fleet]", "owner", "required to push (or pass --push OWNER)")
        if a.check or a.dry_run:
            with tempfile.TemporaryDirectory(prefix="blink-build-") as tmp:
                built = build(fleet, Path(tmp))
                if a.dry_run:
                    print(f"dry run: --push {fleet.owner} would do this (nothing is changed)")
                    for space in fleet.spaces:
                        print("\n".join(plan(space, fleet, built[space.name])))
                else:
                    for space in fleet.spaces:
                        print(f"ok {space.name}: {space.model}@{space.revision}, {len(built[space.name])} files")
            return 0
        built = build(fleet, a.out)
        for space in fleet.spaces:
            print(f"built {a.out / space.name} ({len(built[space.name])} files)")
    except ConfigError as exc:
        print(f"build.py: {exc}", file=sys.stderr)
        return 2
    if a.push:
        try:
            push(fleet, {s.name: a.out / s.name for s in fleet.spaces}, api=api)
        except Exception as exc:  # noqa: BLE001 - the Hub's own message is the useful part
            print(f"build.py: push failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
