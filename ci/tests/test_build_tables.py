"""The fleet file's tables (spaces.toml, read by build.py): a good one loads, a malformed one fails naming the
Space and the key (in-process and on the command line), a checkout without a shared file fails clearly, and what a
table sets (thinking, limits) is what the built Space runs. The real fleet's built folders: test_build.py.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT
from helpers.fleet import build, front_matter, load_module, needs_shared_files

pytestmark = pytest.mark.space


GOOD = """
[fleet]
owner = "someone"

[spaces.alpha]
model = "org/alpha-model"
revision = "v2.1"
short_description = "alpha"
description = "The alpha Space."

[spaces.beta]
model = "org/beta-model"
revision = "0123456789abcdef0123456789abcdef01234567"
short_description = "beta"
description = "The beta Space."
adapter = "org/beta-lora"
adapter_revision = "main"

[spaces.beta.hardware]
size = "xlarge"
"""


def test_a_good_fleet_loads(tmp_path):
    path = tmp_path / "spaces.toml"
    path.write_text(GOOD)
    fleet = build.load(path)
    alpha, beta = fleet.spaces
    assert (alpha.served_model_name, alpha.hardware["size"]) == ("alpha", "large")
    assert beta.hardware["size"] == "xlarge" and beta.adapter == "org/beta-lora"
    meta, _ = front_matter(build.readme(beta, fleet))
    assert meta["models"] == ["org/beta-model", "org/beta-lora"]
    assert meta["preload_from_hub"] == ["org/beta-model", "org/beta-lora"]


BAD = [
    # (where the change goes, TOML to splice in, the key the message must name)
    ("delete-model", "", "model"),
    ("alpha", 'modle = "org/typo"', "modle"),
    ("alpha-revision", 'revision = "v 2.1"', "revision"),
    ("alpha-revision", 'revision = ""', "revision"),
    ("alpha-revision", 'revision = "abc1234"', "revision"),
    ("alpha-revision", 'revision = "../main"', "revision"),
    ("alpha", 'adapter = "org/lora"', "adapter_revision"),
    ("alpha", '[spaces.alpha.hardware]\nsize = "medium"', "hardware.size"),
    ("alpha", '[spaces.alpha.hardware]\ntype = "a100-large"', "hardware.type"),
    ("alpha", '[spaces.alpha.vision]\ntowr = "org/x@main"', "vision.towr"),
    ("alpha", "[spaces.alpha.limits]\nmax_questions = 0", "limits.max_questions"),
    ("alpha", "[spaces.alpha.limits]\nmax_questions = 1.5", "limits.max_questions"),
    ("alpha", 'short_description = "' + "x" * 61 + '"', "short_description"),
    ("alpha", 'model = "not a repo"', "model"),
]


def malformed(tmp_path, where: str, splice: str) -> Path:
    text = GOOD
    if where == "delete-model":
        text = text.replace('model = "org/alpha-model"\n', "")
    elif where == "alpha-revision":
        text = text.replace('revision = "v2.1"', splice)
    else:
        text = text.replace("\n[spaces.beta]", f"{splice}\n\n[spaces.beta]")
    if where == "alpha" and splice.startswith("short_description"):
        text = text.replace('short_description = "alpha"\n', "")
    if where == "alpha" and splice.startswith("model ="):
        text = text.replace('model = "org/alpha-model"\n', "")
    path = tmp_path / "spaces.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("where,splice,key", BAD, ids=[f"{k}:{s[:24]}" for _, s, k in BAD])
def test_a_malformed_table_names_the_space_and_the_key(tmp_path, where, splice, key):
    path = malformed(tmp_path, where, splice)
    with pytest.raises(build.ConfigError) as caught:
        build.load(path)
    message = str(caught.value)
    assert "[spaces.alpha]" in message and f" {key}:" in message, message


def test_the_command_line_fails_with_the_message(tmp_path):
    path = malformed(tmp_path, "alpha-revision", 'revision = "v 2.1"')
    done = subprocess.run(
        [sys.executable, str(ROOT / "build.py"), "--config", str(path), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "[spaces.alpha] revision:" in done.stderr and "'v 2.1'" in done.stderr, done.stderr


def test_a_missing_shared_file_fails_clearly(tmp_path):
    """A copy of the repository without app.py: the build refuses and says which file."""
    for name in ("build.py", "spaces.toml", "requirements.txt", "auth.py", "theme.py"):
        if (ROOT / name).is_file():
            shutil.copyfile(ROOT / name, tmp_path / name)
    for folder in ("blink", "space", "fleet"):
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "ci").mkdir()
    shutil.copyfile(ROOT / "ci" / "requirements.txt", tmp_path / "ci" / "requirements.txt")
    done = subprocess.run([sys.executable, "build.py"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "app.py" in done.stderr and "missing" in done.stderr, done.stderr
    assert not (tmp_path / "dist" / "blink-4b").exists()


# --- what the fleet sets is what the Space runs ------------------------------------------------------------

THINKING = GOOD.replace(
    "\n[spaces.beta]",
    """
[spaces.alpha.chat_template]
enable_thinking = true

[spaces.alpha.limits]
max_output_tokens = 2048
max_questions = 7

[spaces.alpha.hardware]
chat_duration_max_s = 90

[spaces.beta]""",
)


def test_a_built_space_runs_with_thinking_on_and_its_limits(tmp_path, demo_dir):
    """Build a Space whose table sets enable_thinking and limits, then resolve its space_config.py exactly as
    app.py does (`resolve_space(space_config)`) and build its chat engine as app.py does: all took effect."""
    needs_shared_files()
    from blink.generate.chat_engine import ChatEngine
    from blink.model.loading import load
    from blink.settings import resolve_space

    (tmp_path / "spaces.toml").write_text(THINKING)
    build.build(build.load(tmp_path / "spaces.toml", only=["alpha"]), tmp_path / "dist")
    config = load_module("space_config_thinking", tmp_path / "dist" / "alpha" / "space_config.py")
    settings, space = resolve_space(config, env={})
    assert settings.enable_thinking is True
    assert (settings.max_output_tokens, settings.max_questions, space.chat_duration_max_s) == (2048, 7, 90)
    # the chat template sees it: thinking off renders an empty <think></think> block, thinking on does not
    loaded = load(str(demo_dir))
    messages = [{"role": "user", "content": "Hi"}]

    def prompt(thinking: bool) -> str:
        engine = ChatEngine(
            loaded, settings.limits, max_output_tokens=settings.max_output_tokens, enable_thinking=thinking
        )
        return loaded.tokenizer.decode(engine.render(messages).ids)

    assert prompt(settings.enable_thinking) != prompt(False)
    assert "</think>" in prompt(False) and "</think>" not in prompt(settings.enable_thinking)
