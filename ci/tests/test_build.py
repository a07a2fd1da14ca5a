"""The fleet builder: spaces.toml -> one uploadable folder per Space (build.py).

Every Space in the real spaces.toml is built into a temporary folder and checked: shared files byte-identical
to the repository's (theme parity), space_config.py importable and complete, the README front matter the Hub
reads, the pins, and that the built folder starts on its own (`python app.py` inside it, demo model) and
answers /healthz; its command line (`--dry-run`, `--check`, without the heavy imports). `--push` is checked by
its call sequence against a recording stand-in for the Hub client (the network is out of reach here). What a
table may hold and how a malformed one fails: test_build_tables.py.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import httpx
import pytest

from build import SHARED_DIRS  # the fleet's shared folders, copied whole
from build import SHARED_FILES as SHARED  # the fleet's shared files, as build.py copies them
from helpers import ROOT, running
from helpers.fleet import MISSING, build, front_matter, load_module, needs_shared_files

pytestmark = pytest.mark.space

TABLES = tomllib.loads((ROOT / "spaces.toml").read_text(encoding="utf-8"))["spaces"]
NAMES = list(TABLES)


@pytest.fixture(scope="module")
def fleet():
    return build.load(ROOT / "spaces.toml")


@pytest.fixture(scope="module")
def dist(fleet, tmp_path_factory) -> Path:
    needs_shared_files()
    out = tmp_path_factory.mktemp("dist")
    build.build(fleet, out)
    return out


def pins(path: Path) -> dict[str, str]:
    out = {}
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            name, eq, version = line.partition("==")
            assert eq and version.strip(), f"{path.name}: {line!r} is not pinned with =="
            out[re.sub(r"[-_.]+", "-", name.split("[")[0].strip()).lower()] = version.strip()
    return out


# --- the fleet file --------------------------------------------------------------------------------


def test_first_space_is_blink_4b(fleet):
    first = fleet.spaces[0]
    assert (first.name, first.model, first.revision) == ("blink-4b", "thegovind/blink-4b", "v1.0")
    assert first.flavor == "zero-a10g" and first.hardware["size"] in ("large", "xlarge")


# --- the built folders -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_shared_files_are_byte_identical(dist, name):
    folder = dist / name
    shared = list(SHARED) + [
        p.relative_to(ROOT).as_posix()
        for folder in SHARED_DIRS
        for p in sorted((ROOT / folder).rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    ]
    for rel in shared:
        assert (folder / rel).read_bytes() == (ROOT / rel).read_bytes(), f"{name}/{rel} differs from the source"
    present = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    assert present - set(shared) == {"space_config.py", "README.md"}, "unexpected files in the Space folder"


@pytest.mark.parametrize("name", NAMES)
def test_space_config_is_importable_and_complete(dist, name):
    from blink.settings import Settings, SpaceSettings, knobs, resolve_space

    config = load_module(f"space_config_{name.replace('-', '_')}", dist / name / "space_config.py")
    table = TABLES[name]
    wanted = [k.constant for k in knobs(Settings) + knobs(SpaceSettings)] + [
        "TITLE",
        "DESCRIPTION",
        "CAVEAT",
        "SYSTEM_PROMPT",
        "ENABLE_THINKING",
        "VISION",
        "VISION_TOWER",
        "IMAGE_LAYOUT",
        "GPU_SIZE",
        "DURATION_MIN_S",
        "DURATION_MAX_S",
        "CHAT_DURATION_MAX_S",
        "MAX_OUTPUT_TOKENS",
    ]
    missing = [n for n in wanted if not hasattr(config, n)]
    assert not missing, f"space_config.py lacks {missing}"
    assert config.MODEL == table["model"] and config.REVISION == table["revision"]
    assert config.API_KEY is None, "a key must never be written into the Space's files"
    assert config.GPU_SIZE == table.get("hardware", {}).get("size", "large")
    assert isinstance(config.ENABLE_THINKING, bool) and isinstance(config.VISION, bool)
    for key, value in table.get("limits", {}).items():
        assert getattr(config, key.upper()) == value
    # the app's own resolution accepts every value (no environment overrides)
    settings, _ = resolve_space(config, env={})
    assert settings.served_name == table.get("served_model_name", name)
    # the single-Space default config at the root: every name it defines, the generated one defines too
    root_config = ROOT / "space_config.py"
    if root_config.is_file():
        names = {
            t.id
            for node in ast.parse(root_config.read_text(encoding="utf-8")).body
            if isinstance(node, (ast.Assign, ast.AnnAssign))
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
            if isinstance(t, ast.Name) and t.id.isupper()
        }
        assert not names - set(vars(config)), f"root space_config.py names missing here: {names - set(vars(config))}"


@pytest.mark.parametrize("name", NAMES)
def test_readme_front_matter_is_what_the_hub_needs(dist, fleet, name):
    meta, body = front_matter((dist / name / "README.md").read_text(encoding="utf-8"))
    table = TABLES[name]
    gradio = pins(ROOT / "ci" / "requirements.txt")["gradio"]
    assert meta["sdk"] == "gradio"
    assert meta["sdk_version"] == gradio and isinstance(meta["sdk_version"], str)
    assert meta["python_version"] in ("3.10", "3.12", "3.10.13", "3.12.12")  # quoted: not the float 3.12
    assert meta["app_file"] == "app.py" and (dist / name / meta["app_file"]).is_file()
    assert table["model"] in meta["models"]
    assert any(entry.split()[0] == table["model"] for entry in meta["preload_from_hub"])
    assert re.fullmatch(r"[1-9][0-9]*[mh]", meta["startup_duration_timeout"])
    assert 0 < len(meta["short_description"]) <= 60
    assert "hardware" not in meta  # not a Hub key: ZeroGPU is set through the API
    # the body tells a visitor how to call this Space: its own URL and its model
    url = f"https://{fleet.owner}-{name}.hf.space".lower()
    served = table.get("served_model_name", name)
    assert f"{url}/v1" in body and f"TYPESAFE_BASE_URL={url}" in body
    assert f'"model": "{served}"' in body and table["model"] in body


def test_requirements_are_pinned_and_agree():
    gpu, cpu = pins(ROOT / "requirements.txt"), pins(ROOT / "ci" / "requirements.txt")
    disagree = {n: (gpu[n], cpu[n]) for n in set(gpu) & set(cpu) if gpu[n] != cpu[n]}
    assert not disagree, f"requirements.txt and ci/requirements.txt disagree: {disagree}"
    for name in (
        "torch",
        "spaces",
        "transformers",
        "flash-linear-attention",
        "peft",
        "safetensors",
        "huggingface-hub",
        "fastapi",
        "uvicorn",
    ):
        assert name in gpu, f"requirements.txt lacks {name}"
    assert gpu["torch"] in build.ZEROGPU_TORCH
    assert "gradio" not in gpu, "the SDK installs gradio (README sdk_version)"
    assert not {"flash-linear-attention", "fla-core", "triton"} & set(cpu), "never in the CPU test env"
    major, minor, patch = (int(x) for x in gpu["transformers"].split("."))
    assert (5, 6, 2) <= (major, minor, patch) < (6, 0, 0), "flash-linear-attention needs transformers>=5.6.2,<6"
    assert build.check_requirements() == cpu["gradio"]


@pytest.mark.parametrize("name", NAMES[:1])
@pytest.mark.e2e
def test_built_space_starts_and_answers_healthz(dist, demo_root, name):
    if "app.py" in MISSING:
        pytest.skip("app.py not written yet")
    folder = dist / name
    served = TABLES[name].get("served_model_name", name)
    env = {"BLINK_MODEL": "demo", "PYTHONPATH": "", "GRADIO_ANALYTICS_ENABLED": "False"}
    with running([sys.executable, "app.py"], demo_root, env=env, cwd=folder, name=f"space-{name}") as url:
        health = httpx.get(url + "/healthz", timeout=10)
        assert health.status_code == 200 and health.json().get("ok") is True
        listed = httpx.get(url + "/v1/models", timeout=10).json()
        names = {m["name"] for m in listed["models"]}
        # the folder's own space_config.py is what it serves (the model is overridden to the demo one)
        assert {served, *TABLES[name].get("model_aliases", [])} <= names


# --- the command line ------------------------------------------------------------------------------


def test_dry_run_lists_repo_hardware_secret_names_and_files(capsys, monkeypatch, tmp_path):
    needs_shared_files()
    monkeypatch.setenv("BLINK_API_KEY", "sk-do-not-print-me")
    assert build.main(["--dry-run", "--out", str(tmp_path / "dist")]) == 0
    out = capsys.readouterr().out
    assert "sk-do-not-print-me" not in out
    assert not (tmp_path / "dist").exists(), "--dry-run wrote files"
    fleet = build.load(ROOT / "spaces.toml")
    for space in fleet.spaces:
        section = out.split(f"Space {fleet.owner}/{space.name}\n", 1)[1].split("\nSpace ", 1)[0]
        assert "zero-a10g" in section and f"size {space.hardware['size']}" in section
        assert "BLINK_API_KEY" in section and "(set)" in section
        for rel in (
            "README.md",
            "space_config.py",
            "app.py",
            "space/ui.py",
            "theme.py",
            "requirements.txt",
            "blink/__init__.py",
            "blink/settings.py",
        ):
            assert re.search(rf"^\s+{re.escape(rel)}$", section, re.M), f"{rel} not listed for {space.name}"


def test_check_writes_nothing(tmp_path):
    needs_shared_files()
    assert build.main(["--check", "--out", str(tmp_path / "dist")]) == 0
    assert not (tmp_path / "dist").exists()


# --- --push's call sequence --------------------------------------------------------------------------


class RecordingHub:
    """Stands in for huggingface_hub.HfApi (an external service): records the calls push() makes."""

    def __init__(self, hardware="cpu-basic"):
        self.calls, self.hardware = [], hardware

    def __getattr__(self, method):
        def record(*args, **kwargs):
            self.calls.append((method, args, kwargs))
            if method == "get_space_runtime":
                return type("Runtime", (), {"hardware": self.hardware, "requested_hardware": self.hardware})()

        return record


@pytest.mark.parametrize("key,hardware", [("sk-123", "cpu-basic"), (None, "zero-a10g")])
def test_push_creates_sets_the_secret_and_uploads_with_deletions(tmp_path, key, hardware):
    fleet = build.load(ROOT / "spaces.toml", owner="someone")
    folders = {}
    for space in fleet.spaces:
        folders[space.name] = tmp_path / space.name
        folders[space.name].mkdir()
        (folders[space.name] / "README.md").write_text("x")
    hub = RecordingHub(hardware)
    env = {"BLINK_API_KEY": key} if key else {}
    build.push(fleet, folders, api=hub, env=env, echo=lambda *_: None)
    space = fleet.spaces[0]
    repo = f"someone/{space.name}"
    calls = [c for c in hub.calls if (c[1][:1] == (repo,) or c[2].get("repo_id") == repo)]
    methods = [c[0] for c in calls]
    expected = ["create_repo", "get_space_runtime"]
    expected += ["request_space_hardware"] if hardware != "zero-a10g" else []
    expected += ["add_space_secret"] if key else []
    assert methods == expected + ["upload_folder"]
    create = calls[0][2]
    assert create["repo_type"] == "space" and create["space_sdk"] == "gradio"
    assert create["space_hardware"] == "zero-a10g" and create["exist_ok"] is True
    if key:
        assert calls[methods.index("add_space_secret")][1] == (repo, "BLINK_API_KEY", key)
    upload = calls[-1][2]
    assert upload["repo_type"] == "space" and upload["folder_path"] == str(folders[space.name])
    assert upload["delete_patterns"] == ["*"]


@pytest.mark.parametrize("name", NAMES)
def test_the_generated_space_config_assigns_each_constant_once(dist, name):
    tree = ast.parse((dist / name / "space_config.py").read_text(encoding="utf-8"))
    assigned = [t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets]
    assert len(assigned) == len(set(assigned)), sorted(n for n in assigned if assigned.count(n) > 1)


BLOCKER = """
import importlib.abc, runpy, sys
HEAVY = ("torch", "PIL", "transformers", "numpy", "gradio", "safetensors")
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HEAVY:
            raise ImportError(f"build.py must not import {name}")
sys.meta_path.insert(0, Block())
sys.argv = ["build.py", "--check"]
try:
    runpy.run_path("build.py", run_name="__main__")
finally:
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in HEAVY)
    print("heavy modules:", loaded)
"""


def test_build_check_runs_without_torch_pillow_or_transformers():
    needs_shared_files()
    done = subprocess.run([sys.executable, "-c", BLOCKER], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok blink-4b" in done.stdout and "heavy modules: []" in done.stdout, done.stdout
