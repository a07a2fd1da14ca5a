"""The moderation policy: the categories `/v1/moderations` asks about, each a definition and a threshold, read
from one file (TOML or JSON) that the `moderation_policy` knob names; the default ships beside this module with
OpenAI's 13 keys (blink/policies/openai.toml).

Each category becomes one `noul` question over the input (`instructions`); a category is flagged when its
reported probability is at or above its threshold. The file is checked whole when the knob is parsed (at
start-up, and by build.py for spaces.toml), so a server never starts with a policy it would fail on. Standard
library only: build.py reads it without torch.
"""

from __future__ import annotations

import json
import math
import tomllib
from dataclasses import dataclass
from pathlib import Path

DEFAULT_FILE = Path(__file__).resolve().parent / "policies" / "openai.toml"
FORMAT = "blink-moderation-policy"
VERSION = 1
MAX_CATEGORIES = 128  # every category is one question of the same decision (within the default max_questions)
MAX_NAME_CHARS = 64
MAX_DEFINITION_CHARS = 2000
CATEGORY_FIELDS = ("definition", "threshold")


@dataclass(frozen=True)
class Category:
    name: str
    definition: str
    threshold: float

    @property
    def instructions(self) -> str:
        """The category as a yes/no question over the input."""
        return f"Does the input contain {self.name}? Here {self.name} means: {self.definition}"


@dataclass(frozen=True)
class Policy:
    categories: tuple[Category, ...]
    source: str  # the file it was read from

    def questions(self) -> dict:
        """The categories as System One `noul` questions, by category name, in the file's order."""
        return {c.name: {"type": "noul", "instructions": c.instructions} for c in self.categories}


def _read(path: Path) -> object:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        return json.loads(text)
    return tomllib.loads(text)


def _category(name: object, entry: object) -> Category:
    where = f"category {name!r}"
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME_CHARS or not name.isprintable():
        raise ValueError(f"{where}: a name is 1-{MAX_NAME_CHARS} printable characters")
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: must be a table with `definition` and `threshold`")
    unknown = sorted(set(entry) - set(CATEGORY_FIELDS))
    if unknown:
        raise ValueError(f"{where}: unknown field {unknown[0]!r} (a category has {', '.join(CATEGORY_FIELDS)})")
    definition = entry.get("definition")
    if not isinstance(definition, str) or not definition.strip() or len(definition) > MAX_DEFINITION_CHARS:
        raise ValueError(f"{where}: `definition` must be a non-empty string of at most {MAX_DEFINITION_CHARS} chars")
    threshold = entry.get("threshold")
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not math.isfinite(threshold):
        raise ValueError(f"{where}: `threshold` must be a number from 0 to 1, got {threshold!r}")
    if not 0 <= threshold <= 1:
        raise ValueError(f"{where}: `threshold` must be from 0 to 1, got {threshold}")
    return Category(name, definition.strip(), float(threshold))


def _policy(data: object, source: str) -> Policy:
    if not isinstance(data, dict):
        raise ValueError("must be a table (an object) with `format`, `version` and `categories`")
    unknown = sorted(set(data) - {"format", "version", "categories"})
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r} (known: format, version, categories)")
    if data.get("format") != FORMAT or data.get("version") != VERSION:
        raise ValueError(f'must say format = "{FORMAT}" and version = {VERSION}')
    categories = data.get("categories")
    if not isinstance(categories, dict) or not categories:
        raise ValueError("`categories` must be a table of at least one category")
    if len(categories) > MAX_CATEGORIES:
        raise ValueError(f"{len(categories)} categories; a policy has at most {MAX_CATEGORIES}")
    return Policy(tuple(_category(name, entry) for name, entry in categories.items()), source)


def load_policy(path: str | Path | None) -> Policy:
    """The policy in `path` (None: the default), or ValueError naming the file and its fault in one line."""
    path = DEFAULT_FILE if path is None else Path(path)
    if path.suffix not in (".toml", ".json"):
        raise ValueError(f"moderation policy {path}: must be a .toml or .json file")
    try:
        return _policy(_read(path), str(path))
    except FileNotFoundError:
        raise ValueError(f"moderation policy {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"moderation policy {path}: cannot be read: {exc}") from None
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        kind = "JSON" if path.suffix == ".json" else "TOML"
        raise ValueError(f"moderation policy {path}: not valid {kind}: {exc}") from None
    except ValueError as exc:
        raise ValueError(f"moderation policy {path}: {exc}") from None


class PolicyFile:
    """The `moderation_policy` knob's parser: empty or unset for the default policy, else the path of a .toml or
    .json file. The file itself is read and checked whole as the server starts (`load_policy`, a one-line
    StartupError naming the file and its fault) and by build.py (fleet/schema.py)."""

    def __call__(self, value) -> str | None:
        if value is not None and not isinstance(value, str):
            raise ValueError(f"must be a path (a string), got {type(value).__name__}")
        if not value:
            return None
        if Path(value).suffix not in (".toml", ".json"):
            raise ValueError(f"{value!r}: a moderation policy is a .toml or .json file")
        return value

    def __str__(self) -> str:
        return "a .toml or .json file"
