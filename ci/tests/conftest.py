"""Shared fixtures: the demo models (the text one and demo-vision, each built once per run, offline) and real
servers on loopback.

Servers are real processes (`python -m blink serve ...`), reached over HTTP by real clients. The helpers the
fixtures and the tests share live in ci/tests/helpers/ (a test file imports those, never another test file or
this one); the markers are listed in pytest.ini and explained in ci/tests/README.md.

Memory: each pytest process (ci/test.sh runs two workers, pytest-xdist; a file runs whole in one of them: see
`in_groups`) stays beside the servers it starts, so what a module leaves behind is given back when it ends (`gc`
and glibc's heap trim, after its module-scoped fixtures are torn down), and a session server is stopped after the
last test that uses it (not at the end of the session).
"""

from __future__ import annotations

import ctypes
import gc
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ORIGIN, ROOT, SERVERS, blink_serve, running
from helpers.vllm import vllm_replicas_running


def give_back_memory() -> None:
    """Free what is unreachable and return the freed heap to the operating system (glibc keeps it otherwise)."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


# the files the two vLLM replicas (`vllm_replicas`) serve, in the order they run
VLLM_FILES = ("test_router.py", "test_vllm.py", "test_run_batch_vllm.py", "test_vllm_serve.py")


def pytest_collection_modifyitems(session, config, items):
    """The two vLLM replicas (`vllm_replicas`) serve the VLLM_FILES: their tests run back to back, in that order,
    where test_vllm.py's (or test_vllm_serve.py's) would, so the replicas are up from the first to the last and no
    longer (not through every file between them), and test_router.py's first, whatever order the files were named in
    (test_vllm_serve.py's last tests kill a replica)."""
    at = next((k for k, item in enumerate(items) if item.path.name in VLLM_FILES[1:]), None)
    if at is not None:
        shared = [item for name in VLLM_FILES for item in items if item.path.name == name]
        rest = [item for item in items if item.path.name not in VLLM_FILES]
        before = sum(1 for item in items[:at] if item.path.name not in VLLM_FILES)
        items[:] = rest[:before] + shared + rest[before:]
    if hasattr(config, "workerinput"):  # an xdist worker: the controller schedules what the workers collect
        in_groups(items)


# the session fixtures whose servers SERVERS holds (stopped after the last test that uses them)
SESSION_SERVERS = ("vllm_replicas", "server", "keyed_server", "surface")


def unit_of(file_name: str) -> str:
    """The unit of work of a test file under pytest-xdist: the file, or "vllm" for the VLLM_FILES."""
    return "vllm" if file_name in VLLM_FILES else file_name


def group_of(item) -> str:
    return unit_of(item.path.name)


def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist's scope scheduling (a unit of work runs whole on one worker, its module fixtures and servers
    started once), its units `unit_of`'s: the VLLM_FILES, which share the replicas, are one."""
    from xdist.scheduler import LoadScopeScheduling

    class ByUnit(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid.split("::", 1)[0].rsplit("/", 1)[-1])

    return ByUnit(config, log)


def in_groups(items) -> None:
    """The order of the units of work under pytest-xdist (ci/test.sh runs two workers, `--no-loadscope-reorder`:
    the scheduler hands them out in this order, `pytest_xdist_make_scheduler`). The units that take longest go
    first (the vLLM one, then the files with a `slow` test), so that the run does not end waiting for a long file
    begun last; within that, the files that use the same session servers run one after another, so a worker stops
    one once the files that use it are behind it (`pytest_runtest_teardown`) and seldom starts it again."""
    slow = {group_of(item) for item in items if item.get_closest_marker("slow")}
    rank = {"vllm": 0, **{name: 1 for name in slow - {"vllm"}}}
    uses: dict[str, set] = {}
    for item in items:
        uses.setdefault(group_of(item), set()).update(f for f in SESSION_SERVERS if f in item.fixturenames)

    def key(item) -> tuple:
        group = group_of(item)
        return rank.get(group, 2), [f not in uses[group] for f in SESSION_SERVERS]

    items.sort(key=key)  # stable: each file keeps its order


def still_to_run(item, nextitem) -> list:
    """The tests a server may still be needed by once `item` is done: in one process every later test; in an
    xdist worker only the rest of the next test's unit (which units this worker gets later is not known yet)."""
    if nextitem is None:
        return []
    items = item.session.items
    rest = items[items.index(nextitem) :]
    if not hasattr(item.config, "workerinput"):
        return rest
    return [later for later in rest if group_of(later) == group_of(nextitem)]


def pytest_runtest_setup(item):
    SERVERS.wake(item.fixturenames)  # a session server this worker stopped, needed again (still_to_run)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield  # the item's fixtures are finalized (a module's, after its last test)
    SERVERS.release_after(still_to_run(item, nextitem))
    if nextitem is None or nextitem.module is not item.module:
        give_back_memory()


@pytest.fixture(scope="session")
def demo_root(tmp_path_factory) -> Path:
    """The folder BLINK_DEMO_DIR points at: `--model demo` finds (or builds) `demo-model` inside it."""
    root = Path(os.environ.get("BLINK_TEST_DEMO_ROOT") or tmp_path_factory.mktemp("blink-demo"))
    os.environ["BLINK_DEMO_DIR"] = str(root)
    from blink.model.demo import demo_model_dir

    demo_model_dir()  # build once for the whole session
    return root


@pytest.fixture(scope="session")
def demo_dir(demo_root) -> Path:
    return demo_root / "demo-model"


@pytest.fixture(scope="session")
def vision_root(demo_root):
    """The same folder, with `demo-vision` built in it too (test_images.py and test_image_limits.py serve it)."""
    from blink.model.demo import demo_model_dir

    demo_model_dir(vision=True)  # built once, before any server starts
    return demo_root


def session_server(fixture: str, argv: list[str], demo_root: Path, env: dict | None = None, name: str = "") -> str:
    """A session server held by SERVERS, which can start it again on its port (`wake`)."""

    def start(port: int | None = None):
        return running(argv, demo_root, env=env, port=port, name=name)

    return SERVERS.start(fixture, start(), again=start)


@pytest.fixture(scope="session")
def server(demo_root):
    """The standalone server with the demo model, open (no key), batching off."""
    yield session_server("server", blink_serve(), demo_root, name="serve")
    SERVERS.stop("server")


@pytest.fixture(scope="session")
def keyed_server(demo_root):
    """The standalone server with an API key."""
    env = {"BLINK_API_KEY": "sekret-key-123"}
    yield session_server("keyed_server", blink_serve(), demo_root, env=env, name="serve-keyed")
    SERVERS.stop("keyed_server")


@pytest.fixture(scope="session")
def surface(demo_root):
    """The standalone server with CORS for `ORIGIN` and a model alias (`blink-alias`), for the OpenAI surface beyond
    chat: test_openai_surface.py and test_openai_text_completions.py, which run back to back."""
    flags = ("--cors-origins", ORIGIN, "--model-aliases", "blink-alias")
    yield session_server("surface", blink_serve(*flags), demo_root, name="serve-surface")
    SERVERS.stop("surface")


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium for one browser test file (test_space_browser*.py), quit after its last test."""
    from helpers import headless_chromium

    with headless_chromium() as driver:
        yield driver


@pytest.fixture(scope="session")
def engine(demo_dir):
    """The engine in-process (for executor and engine-level checks)."""
    from blink.decide.planner import Engine
    from blink.model.loading import load

    return Engine(load(str(demo_dir)))


@pytest.fixture(scope="session")
def qwen3_dir(tmp_path_factory) -> Path:
    """The qwen3 demo model (`make-demo-model --arch qwen3`): the architecture the CPU build of vLLM loads."""
    out = tmp_path_factory.mktemp("qwen3") / "qwen3-demo"
    subprocess.run(
        [sys.executable, "-m", "blink", "make-demo-model", str(out), "--arch", "qwen3"],
        check=True,
        cwd=ROOT,
        capture_output=True,
        timeout=600,
    )
    return out


@pytest.fixture(scope="session")
def vllm_replicas(qwen3_dir):
    """Two real vLLM CPU replicas of the qwen3 demo model, `[(url, process)]`, shared by test_router.py,
    test_vllm.py and test_vllm_serve.py (two of them fill two cores: never more) and stopped after the last test
    that uses them."""
    yield SERVERS.start("vllm_replicas", vllm_replicas_running(qwen3_dir))
    SERVERS.stop("vllm_replicas")


@pytest.fixture(scope="session")
def qwen3_engine(qwen3_dir):
    """blink's engine on the qwen3 model, for `prepare` (prompts, reads) and `answer`: what test_vllm.py compares
    the replicas with and test_vllm_serve.py's failover tests prepare with. Loaded once for both (they were one
    module); only they use it, and they run back to back (above), so its caches see the same calls in the same
    order as then."""
    from blink.decide.planner import Engine
    from blink.model.loading import load

    return Engine(load(str(qwen3_dir)))
