"""Shared fixtures: the demo model (built once per run, offline) and real servers on loopback.

Servers are real processes (`python -m blink serve ...`), reached over HTTP by real clients. The helpers the
fixtures and the tests share live in ci/tests/helpers/ (a test file imports those, never another test file or
this one). The markers (pytest.ini) are set here from each file's kind; ci/tests/README.md lists them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from helpers import blink_serve, running


@pytest.fixture(scope="session")
def demo_root(tmp_path_factory) -> Path:
    """The folder BLINK_DEMO_DIR points at: `--model demo` finds (or builds) `demo-model` inside it."""
    root = Path(os.environ.get("BLINK_TEST_DEMO_ROOT") or tmp_path_factory.mktemp("blink-demo"))
    os.environ["BLINK_DEMO_DIR"] = str(root)
    from blink.demo import demo_model_dir

    demo_model_dir()  # build once for the whole session
    return root


@pytest.fixture(scope="session")
def demo_dir(demo_root) -> Path:
    return demo_root / "demo-model"


@pytest.fixture(scope="session")
def server(demo_root):
    """The standalone server with the demo model, open (no key), batching off."""
    with running(blink_serve(), demo_root, name="serve") as url:
        yield url


@pytest.fixture(scope="session")
def keyed_server(demo_root):
    """The standalone server with an API key."""
    with running(blink_serve(), demo_root, env={"BLINK_API_KEY": "sekret-key-123"}, name="serve-keyed") as url:
        yield url


@pytest.fixture(scope="session")
def engine(demo_dir):
    """The engine in-process (for executor and engine-level checks)."""
    from blink.engine import Engine
    from blink.loading import load

    return Engine(load(str(demo_dir)))
