"""The jevcompat conformance suite against our server: every MUST and every SHOULD, with and without a key."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import ARTIFACTS


def run_jevcompat(url: str, *extra: str) -> dict:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    report = ARTIFACTS / f"jevcompat{'-key' if extra else ''}.json"
    exe = shutil.which("jevcompat", path=str(Path(sys.executable).parent)) or "jevcompat"
    proc = subprocess.run(
        [exe, "test", url, "--json", str(report), *extra], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return json.loads(report.read_text())


def assert_all_pass(report: dict, skipped_ok: set[str]) -> None:
    failed = {
        r["id"]: r["reason"] or r["findings"]
        for r in report["results"]
        if r["status"] not in ("pass",) and r["id"] not in skipped_ok
    }
    assert not failed, failed
    assert not report["aborted"]


def test_jevcompat_open_server(server):
    report = run_jevcompat(server)
    # auth checks only run with --key; errors.shape only fires for refused model names, and this server
    # accepts any model name (as the issue asks), so the case never arises
    assert_all_pass(report, {"auth.bearer", "auth.missing", "auth.invalid", "errors.shape"})


def test_jevcompat_with_key(keyed_server):
    report = run_jevcompat(keyed_server, "--key", "sekret-key-123")
    assert_all_pass(report, {"auth.ignored-when-off", "errors.shape"})
    statuses = {r["id"]: r["status"] for r in report["results"]}
    assert statuses["auth.bearer"] == statuses["auth.missing"] == statuses["auth.invalid"] == "pass"
