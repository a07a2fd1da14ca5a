#!/usr/bin/env bash
# Creates .venv-router: vllm-router (a Rust load balancer for vLLM replicas, shipped as a Python wheel with its
# `vllm-router` command) for the tests and the bench that put blink in front of it (ci/tests/test_router.py,
# bench/scale_out/router.py). It shares no pins with .venv: the wheel holds the binary and needs nothing else.
# Idempotent: a finished venv is marked with .venv-router/.ready and reused.
set -euo pipefail
cd "$(dirname "$0")/.."
. ci/venv-home.sh
venv_home .venv-router ci/router-venv.sh
if [ -f "$V/.ready" ] && [ -x "$V/bin/vllm-router" ]; then
  exit 0
fi
PY=${PYTHON:-python3}
[ -x "$V/bin/python" ] || "$PY" -m venv "$V"
"$V/bin/pip" install -q "vllm-router==0.1.17"
if ! "$V/bin/vllm-router" --help >/dev/null; then
  echo "vllm-router was installed into $V but its command does not run (see above)" >&2
  exit 1
fi
venv_ready "$V"
