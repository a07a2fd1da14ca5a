#!/usr/bin/env bash
# Creates .venv with the CPU test environment: torch first and pinned (the local CPU build; an unpinned
# torch would pull a multi-GB CUDA build), then everything else from ci/requirements.txt. Idempotent. Installs
# nothing through apt and needs no root: the tests that need a system tool fetch it themselves
# (ci/promtool-setup.sh, ci/browser-setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# A whole run builds ~13 GB of venvs the first time (the client suites' own environments, ZeroGPU's CUDA torch the
# largest; kept outside the checkout, ci/venv-home.sh) and up to ~5 GB of pytest temp files; short of that, dozens
# of tests error far from the cause.
FREE_GB=$(df -Pk . | awk 'NR == 2 { print int($4 / 1048576) }')
if [ "${FREE_GB:-0}" -lt 20 ]; then
  echo "ci: only ${FREE_GB} GB free on the disk holding $(pwd); a full run needs ~20 GB (venvs and temp files):" \
    "expect errors from whichever test runs out of space" >&2
fi
TORCH=2.13.0
# step WHAT COMMAND...: one line saying what it does and, when done, its seconds; pip's own output only when it fails
# (a first install is minutes of it: torch alone ~200 MB, ci/requirements.txt ~150 packages)
step() {
  local what=$1 start=$SECONDS log
  shift
  log=$(mktemp)
  printf 'ci: %s… ' "$what"
  if ! "$@" >"$log" 2>&1; then
    printf 'failed after %s s:\n' "$((SECONDS - start))"
    cat "$log" >&2
    rm -f "$log"
    return 1
  fi
  rm -f "$log"
  printf '%s s\n' "$((SECONDS - start))"
}
# built once per set of pins outside the checkout, .venv linking to it (ci/venv-home.sh)
. ci/venv-home.sh
venv_home .venv ci/setup.sh ci/requirements.txt ci/requirements-nodeps.txt
if [ ! -f "$V/.ready" ] || ! "$V/bin/python" -c "import torch, transformers, gradio" 2>/dev/null; then
  echo "ci: building .venv in $V (a first install: minutes)"
  START=$SECONDS
  [ -x "$V/bin/python" ] || step "creating the venv with $("$PY" --version 2>&1)" "$PY" -m venv "$V"
  step "upgrading pip" "$V/bin/pip" install -q --upgrade pip
  step "installing torch $TORCH (CPU)" "$V/bin/pip" install -q "torch==$TORCH"
  step "installing ci/requirements.txt ($(grep -cE '^[A-Za-z0-9]' ci/requirements.txt) pins)" \
    "$V/bin/pip" install -q -r ci/requirements.txt
  step "installing ci/requirements-nodeps.txt (without their dependencies)" \
    "$V/bin/pip" install -q --no-deps -r ci/requirements-nodeps.txt
  venv_ready "$V"
  echo "ci: .venv built ($((SECONDS - START)) s)"
else
  echo "ci: .venv ready (a link to $V)"
fi
# flash-linear-attention and triton must never be in the CPU environment (the first forward crashes)
if .venv/bin/python -c "import triton" 2>/dev/null; then
  echo "triton is installed in .venv: remove it (CPU forwards crash with it)" >&2
  exit 1
fi
