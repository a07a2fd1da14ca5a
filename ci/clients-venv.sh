#!/usr/bin/env bash
# Creates .venv-clients: the decision clients built on TypeSafe's wires, for ci/tests/test_decision_clients.py (run
# by ci/tests/decision_clients.py, and the CLIs and MCP service they install): typesafe-haystack (Haystack's
# router and classifier), typesafe-eval (its OpenAI Decisions and System One backends), typesafe-mcp (an MCP
# stdio service), typesafeai-cli (`typesafe`) and typesafe-decisions. Their own environment: typesafe-eval and
# typesafe-haystack pull haystack-ai and openai releases the test environment does not hold. (LiteLLM's
# `systemone()` and decision-model guardrail run from .venv-labels, ci/labels-venv.sh.)
# Idempotent: a finished venv is marked with .venv-clients/.ready and reused.
set -euo pipefail
cd "$(dirname "$0")/.."
. ci/venv-home.sh
venv_home .venv-clients ci/clients-venv.sh
PINS=(
  "typesafe-haystack==0.1.1" "typesafe-eval==1.4.0" "typesafe-mcp==0.5.2" "typesafeai-cli==0.3.3"
  "typesafe-decisions==0.1.0" "typesafe-sdk==0.7.5" "haystack-ai==3.4.1"
)
if [ -f "$V/.ready" ] && "$V/bin/python" -c "import haystack_integrations.components.routers.typesafe, typesafe_eval, typesafe_mcp, typesafe_cli, typesafe_decisions" 2>/dev/null; then
  exit 0
fi
PY=${PYTHON:-python3}
[ -x "$V/bin/python" ] || "$PY" -m venv "$V"
"$V/bin/pip" install -q "${PINS[@]}"
"$V/bin/python" - "${PINS[@]}" <<'PYEOF'
import importlib.metadata as m, sys
for pin in sys.argv[1:]:
    name, version = pin.split("==")
    assert m.version(name) == version, (name, m.version(name))
PYEOF
venv_ready "$V"
