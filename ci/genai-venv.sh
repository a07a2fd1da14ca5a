#!/usr/bin/env bash
# Creates .venv-genai: google-genai, Google's Gemini client (its `client.decisions.create`), for
# ci/tests/test_gemini.py (run by ci/tests/genai_client.py). Its own environment: google-genai 3.3.0 requires
# tenacity<9.2, and the test environment holds tenacity 9.2.1 (what typesafe-sdk and langchain-core resolve to).
# Idempotent: a finished venv is marked with .venv-genai/.ready and reused.
set -euo pipefail
cd "$(dirname "$0")/.."
. ci/venv-home.sh
venv_home .venv-genai ci/genai-venv.sh
GENAI=3.3.0
if [ -f "$V/.ready" ] && "$V/bin/python" -c "from google import genai; from google.genai import decisions" 2>/dev/null; then
  exit 0
fi
PY=${PYTHON:-python3}
[ -x "$V/bin/python" ] || "$PY" -m venv "$V"
"$V/bin/pip" install -q "google-genai==$GENAI"
"$V/bin/python" -c "import importlib.metadata as m; assert m.version('google-genai') == '$GENAI', m.version('google-genai')"
venv_ready "$V"
