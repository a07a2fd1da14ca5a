"""Clients the tests drive: one MCP session (`mcp_call`), the JS clients of ci/js (`npm_installed`,
`node_script`), a headless Chromium, the bearer header, and the UI's Decide event as the page sends it
(`form_args`, `example_form`)."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path

from helpers.servers import ROOT


def mcp_call(endpoint: str, work, headers: dict | None = None):
    """One MCP session (the `mcp` client over streamable HTTP) with the server at `endpoint` (the MCP route's full
    URL): initialize, then `await work(session)`; its result."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client

    async def session():
        async with streamablehttp_client(endpoint, headers=headers) as (read, write, _):
            async with ClientSession(read, write) as mcp:
                await mcp.initialize()
                return await work(mcp)

    return asyncio.run(session())


JS = ROOT / "ci" / "js"


def npm_installed(folder: Path = JS, timeout: float = 300) -> Path:
    """`folder`, after `npm ci` there unless every dependency its package.json pins is installed at that version (a
    node_modules from before a dependency was added or bumped is brought up to the lock)."""
    wanted = json.loads((folder / "package.json").read_text())["dependencies"]

    def installed(name: str, version: str) -> bool:
        found = folder / "node_modules" / name / "package.json"
        return found.is_file() and json.loads(found.read_text()).get("version") == version

    # `npm ci` empties node_modules first: never while another test worker reads it
    with open(Path(tempfile.gettempdir()) / "blink-npm-ci.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not all(installed(name, version) for name, version in wanted.items()):
            npm = shutil.which("npm") or "npm"
            subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=folder, check=True, timeout=timeout)
    return folder


CHROMEDRIVER = "/usr/bin/chromedriver"


@contextmanager
def headless_chromium():
    """A headless Chromium driven by selenium, closed on exit (ci/browser-setup.sh installs chromium,
    chromium-driver and selenium when they are missing)."""
    try:
        import selenium  # noqa: F401

        have_selenium = True
    except ImportError:
        have_selenium = False
    if not (have_selenium and shutil.which("chromium") and os.path.exists(CHROMEDRIVER)):
        subprocess.run(["bash", str(ROOT / "ci" / "browser-setup.sh")], check=True, timeout=900)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-dev-shm-usage",
        "--window-size=1400,1800",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def node_script(script: str, *args: str, timeout: float = 300) -> dict:
    """Runs ci/js/`script` with `args` under node (installing ci/js first when needed) and returns the one JSON line
    it prints last."""
    run = subprocess.run(["node", script, *args], cwd=npm_installed(), capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def bearer(key: str | None) -> dict | None:
    """The Authorization header for `key` (None: no header)."""
    return {"Authorization": f"Bearer {key}"} if key else None


def slots(*questions) -> list:
    """The Decide event's 16 question-slot inputs: the given (id, type, instructions, options), then blanks."""
    out = [v for q in questions for v in q]
    for i in range(len(questions), 4):
        out += [f"q{i + 1}", "noul", "", ""]
    return out


def form_args(state: str, *questions, calibration: str = "default") -> list:
    """The UI's Decide event's 19 inputs, as the page sends them: the state, the number of questions shown, the
    four question slots (`questions` are (id, type, instructions, options) tuples; the rest are blanks) and the
    Calibration menu (`default`: the Space's default, no `x_calibration` sent; else the value it sends)."""
    return [state, len(questions), *slots(*questions), calibration]


def example_form(values: list, calibration: str = "default") -> list:
    """A one-click example's form as the Decide event's 19 inputs: what its event fills the form with (its values,
    gradio_page.values_only, less the cleared answers that follow them) and the Calibration menu."""
    return [*values[: 2 + 4 * 4], calibration]
