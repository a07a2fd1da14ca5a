#!/usr/bin/env bash
# Creates .venv with the CPU test environment: torch first and pinned (the local CPU build; an unpinned
# torch would pull a multi-GB CUDA build), then everything else from ci/requirements.txt. Idempotent. Installs
# nothing through apt and needs no root: the tests that need a system tool fetch it themselves
# (ci/promtool-setup.sh, ci/browser-setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# A whole run builds ~13 GB of venvs beside the checkout (the client suites' own environments, ZeroGPU's CUDA torch
# the largest) and up to ~5 GB of pytest temp files; short of that, dozens of tests error far from the cause.
FREE_GB=$(df -Pk . | awk 'NR == 2 { print int($4 / 1048576) }')
if [ "${FREE_GB:-0}" -lt 20 ]; then
  echo "ci: only ${FREE_GB} GB free on the disk holding $(pwd); a full run needs ~20 GB (venvs and temp files):" \
    "expect errors from whichever test runs out of space" >&2
fi
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q "torch==2.13.0"
.venv/bin/pip install -q -r ci/requirements.txt
.venv/bin/pip install -q --no-deps -r ci/requirements-nodeps.txt
# flash-linear-attention and triton must never be in the CPU environment (the first forward crashes)
if .venv/bin/python -c "import triton" 2>/dev/null; then
  echo "triton is installed in .venv: remove it (CPU forwards crash with it)" >&2
  exit 1
fi
