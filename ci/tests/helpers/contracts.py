"""Wire contracts every server must keep: unknown paths and methods (`UNROUTED`, `ROOT_UNROUTED`,
`check_unrouted`) and the conformance suite (`run_jevcompat`, `assert_all_pass`)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import httpx

from helpers.servers import ARTIFACTS

UNROUTED = [
    ("GET", "/v1/nothing-here", 404),
    ("POST", "/v1/embeddings", 404),
    ("GET", "/v1/responses", 405),
    ("GET", "/v1/chat/completions", 405),
    ("DELETE", "/v1/models", 405),
    ("GET", "/v1/systemone", 405),
    ("POST", "/v1/systemone/batch", 404),
    ("POST", "/v2/nothing-here", 404),  # not /v1/, but no Gradio path either: the Space answers it too
]
# outside /v1/ on the standalone server (the root is Gradio's on the Space)
ROOT_UNROUTED = [
    ("GET", "/", 404),
    ("POST", "/nothing-here", 404),
    ("GET", "/v2/nothing-here", 404),
    ("POST", "/healthz", 405),
    ("PUT", "/mcp", 405),
]


def check_unrouted(r: httpx.Response, path: str, status: int) -> None:
    """An unknown path or method (under /v1/, or anywhere on the standalone server): the wire's own error shape,
    with a request id."""
    assert r.status_code == status and r.headers["x-typesafe-request-id"].startswith("req_")
    body = r.json()
    if path.startswith("/v1/systemone"):
        assert isinstance(body["error"], str) and body["detail"]["error_type"] == "not_found_error"
    else:
        assert body["error"]["type"] == "invalid_request_error" and path in body["error"]["message"]
        assert r.headers["x-request-id"] == r.headers["x-typesafe-request-id"]
    if status == 405:
        assert r.headers["allow"] and r.request.method not in r.headers["allow"]


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
