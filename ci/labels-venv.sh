#!/usr/bin/env bash
# Creates .venv-labels: the clients that ask a server for label probabilities under other names
# (ci/tests/test_rerank.py, and the moderation and loglikelihood tests): LiteLLM, the openai SDK, LlamaIndex's
# JinaRerank, and Open WebUI's own reranker class. Open WebUI's wheel is installed --no-deps (the full package
# pulls an unpinned CUDA torch) with only what `open_webui.retrieval.models.external` imports, at Open WebUI's
# own pins; importing it needs DATA_DIR, WEBUI_SECRET_KEY, FRONTEND_BUILD_DIR (holding static/), STATIC_DIR and a
# VECTOR_DB other than chroma set (the tests set them). Run LiteLLM with LITELLM_LOCAL_MODEL_COST_MAP=True: it
# fetches a cost map at import otherwise.
# Idempotent: a finished venv is marked with .venv-labels/.ready and reused.
set -euo pipefail
cd "$(dirname "$0")/.."
. ci/venv-home.sh
venv_home .venv-labels ci/labels-venv.sh
if [ -f "$V/.ready" ] && "$V/bin/python" -c "import litellm, openai, llama_index.postprocessor.jinaai_rerank, open_webui" 2>/dev/null; then
  exit 0
fi
PY=${PYTHON:-python3}
[ -x "$V/bin/python" ] || "$PY" -m venv "$V"
"$V/bin/pip" install -q \
  "litellm==1.110.2" "openai==3.57.0" "requests==2.34.2" \
  "llama-index-core==0.14.25" "llama-index-postprocessor-jinaai-rerank==0.6.0"
# open_webui.retrieval.models.external's imports (env, utils.headers -> models, config, oauth), pinned as
# Open WebUI 0.12.4 pins them
"$V/bin/pip" install -q \
  "typer==0.29.2" "uvicorn[standard]==0.54.0" "markdown==3.10.2" "beautifulsoup4==4.14.3" "cryptography==48.0.1" \
  "pyjwt[crypto]==2.13.0" "fastapi==0.136.3" "python-socketio==5.16.2" "orjson==3.11.9" "python-mimeparse==2.0.0" \
  "authlib==1.7.2" "mcp==2.3.0" "redis==8.0.1" "alembic==1.18.4" "bcrypt==5.0.0" "validators==0.35.0" \
  "langchain-core==1.4.8" "pytz==2026.2" "sqlalchemy[asyncio]==2.0.50"
"$V/bin/pip" install -q --no-deps "open-webui==0.12.4"
venv_ready "$V"
