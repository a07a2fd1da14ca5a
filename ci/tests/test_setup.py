"""ci/setup.sh, the README's first command, on a machine without root: it sets up .venv through pip alone and runs
nothing through apt, dpkg or sudo (the system tools one test needs, promtool and chromium, are fetched by that
test's own script: ci/promtool-setup.sh, ci/browser-setup.sh). It runs in a copy of the scripts and pins (its
`.venv` link there, not in the checkout: see `setup_scripts`), against the venv built for these pins and that
interpreter in ~/.cache/blink-ci (ci/venv-home.sh; the first run on a machine builds it). Then the Space starts
and answers with the same PATH: nothing it runs needs them either."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from helpers import APP, ROOT, SPACE_ENV, running, systemone

# what a root-only install goes through: hidden, and a stand-in for each that logs its call and fails
ROOT_ONLY = ("apt", "apt-get", "apt-cache", "dpkg", "dpkg-deb", "sudo")
# hidden with no stand-in, so that an "install it when it is missing" step would run on a machine that has them
TOOLS = ("promtool", "chromium", "chromedriver")
SYSTEM_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


def path_without_apt(tmp: Path) -> tuple[str, Path]:
    """A PATH of the system's commands less ROOT_ONLY and TOOLS, with a stand-in for each of ROOT_ONLY that logs its
    call and fails; and the log."""
    shadow, stand_ins, log = tmp / "bin", tmp / "stand-ins", tmp / "calls.log"
    shadow.mkdir()
    stand_ins.mkdir()
    for folder in SYSTEM_DIRS:
        if not os.path.isdir(folder):
            continue
        for name in os.listdir(folder):
            link = shadow / name
            if name in ROOT_ONLY + TOOLS or name.startswith(("apt", "dpkg")) or link.exists() or link.is_symlink():
                continue
            link.symlink_to(os.path.join(folder, name))
    for name in ROOT_ONLY:
        stand_in = stand_ins / name
        stand_in.write_text(f'#!/bin/sh\necho "{name} $*" >> "{log}"\nexit 1\n')
        stand_in.chmod(0o755)
    return f"{stand_ins}{os.pathsep}{shadow}", log


def setup_scripts(tmp: Path) -> Path:
    """A copy of what ci/setup.sh reads (the scripts, the pins), so that it links `.venv` in the copy: the python3
    on the PATH without apt may be another interpreter (its own venv, by ci/venv-home.sh's key), and relinking the
    checkout's `.venv` would pull the environment from under the other test worker."""
    copy = tmp / "checkout"
    (copy / "ci").mkdir(parents=True)
    for source in [*(ROOT / "ci").glob("*.sh"), *(ROOT / "ci").glob("requirements*.txt")]:
        shutil.copy2(source, copy / "ci" / source.name)
    return copy / "ci" / "setup.sh"


def test_setup_installs_nothing_through_apt_and_the_space_serves(tmp_path, demo_root):
    assert (ROOT / ".venv" / "bin" / "python").exists(), "run bash ci/setup.sh once first"
    path, log = path_without_apt(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("PATH", "PYTHON")}
    ran = subprocess.run(
        ["bash", str(setup_scripts(tmp_path))], env={**env, "PATH": path}, capture_output=True, text=True, timeout=900
    )
    calls = log.read_text() if log.exists() else ""
    assert ran.returncode == 0, (ran.returncode, ran.stderr[-3000:], calls)
    assert calls == "", calls
    # the README's first command's second half: the Space, on the PATH without apt, dpkg, sudo, promtool, chromium
    with running(APP, demo_root, env={**SPACE_ENV, "PATH": path}, name="space-no-apt") as url:
        answers = systemone(url)["answers"]
    assert set(answers) == {"spam", "topic", "urgency"}
    assert not log.exists(), log.read_text()
