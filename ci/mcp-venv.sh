#!/usr/bin/env bash
# Creates .venv-mcp: the MCP client of the README's and docs' MCP examples (ci/examples.py), mcp 2.x. The
# server's environment cannot hold it: Gradio pins the server's `mcp` below 2 (ci/requirements.txt: mcp==1.30.0).
# Idempotent: a finished venv is marked with .venv-mcp/.ready and reused.
set -euo pipefail
cd "$(dirname "$0")/.."
. ci/venv-home.sh
venv_home .venv-mcp ci/mcp-venv.sh
MCP=2.3.0
if [ -f "$V/.ready" ] && "$V/bin/python" -c "import mcp.client.streamable_http as m; m.streamable_http_client" 2>/dev/null; then
  exit 0
fi
PY=${PYTHON:-python3}
[ -x "$V/bin/python" ] || "$PY" -m venv "$V"
"$V/bin/pip" install -q "mcp==$MCP"
"$V/bin/python" -c "import importlib.metadata as m; assert m.version('mcp') == '$MCP', m.version('mcp')"
venv_ready "$V"
