"""The fleet builder (build.py) as test_build.py and test_build_tables.py load it, and what both read with it:

- `build`: build.py loaded as a module of its own (`load_module`, which also loads a built Space's space_config.py);
- `MISSING` and `needs_shared_files`: the fleet's shared files not written yet, and the skip that names them;
- `front_matter`: a Space README's YAML block, parsed, and its body.

build.py imports blink, so this module is imported as `helpers.fleet`, not from the package.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest
import yaml

from build import SHARED_FILES as SHARED  # the fleet's shared files, as build.py copies them
from helpers import ROOT

MISSING = [name for name in SHARED if not (ROOT / name).is_file()]


def load_module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


build = load_module("blink_fleet_build", ROOT / "build.py")


def needs_shared_files():
    if MISSING:
        pytest.skip(f"shared file(s) not written yet: {', '.join(MISSING)}")


def front_matter(readme: str) -> tuple[dict, str]:
    m = re.match(r"---\n(.*?)\n---\n(.*)", readme, re.S)
    assert m, "README.md does not start with a --- YAML block ---"
    return yaml.safe_load(m.group(1)), m.group(2)
