#!/usr/bin/env bash
# Starts one vLLM replica (OpenAI-compatible server) for blink to sit in front of:
#   ci/vllm-serve.sh MODEL_DIR PORT [extra vLLM arguments...]
# It serves MODEL_DIR under its folder path as the model name on 127.0.0.1:PORT (HOST overrides) and runs in the
# foreground until stopped. Then: python -m blink serve --engine vllm --engine-url http://127.0.0.1:PORT.
# By default it uses .venv-vllm (the CPU build, made by ci/vllm-venv.sh if missing); on a CUDA box point VLLM_PYTHON
# at a Python with a CUDA vLLM installed (pip install vllm) and pass GPU arguments after PORT.
# CPU defaults, each overridable: KV_CACHE_BYTES=268435456 (256 MiB of KV cache; --kv-cache-memory-bytes after
# PORT wins), VLLM_CPU_OMP_THREADS_BIND=nobind (share the cores with other processes); MAX_MODEL_LEN=8192.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 MODEL_DIR PORT [extra vLLM arguments...]" >&2
  exit 2
fi
MODEL_DIR=$1
PORT=$2
shift 2
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CPU_ARGS=()
if [ -z "${VLLM_PYTHON:-}" ]; then
  bash "$ROOT/ci/vllm-venv.sh"
  VLLM_PYTHON="$ROOT/.venv-vllm/bin/python"
  # vLLM's CPU default takes a share of the machine's whole memory (--gpu-memory-utilization) for each replica
  CPU_ARGS=(--kv-cache-memory-bytes "${KV_CACHE_BYTES:-268435456}")
  export VLLM_CPU_OMP_THREADS_BIND=${VLLM_CPU_OMP_THREADS_BIND:-nobind}
fi
# a local folder never needs the Hub; the usage-stats ping would only wait on an unreachable network
export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1} VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
# its engine and worker processes talk over loopback, not the machine's first interface
export VLLM_HOST_IP=${VLLM_HOST_IP:-127.0.0.1}
# the module, not the `vllm` command: vllm-cpu's console script crashes on its own version lookup
exec "$VLLM_PYTHON" -m vllm.entrypoints.openai.api_server --model "$MODEL_DIR" \
  --host "${HOST:-127.0.0.1}" --port "$PORT" --max-model-len "${MAX_MODEL_LEN:-8192}" "${CPU_ARGS[@]}" "$@"
