#!/usr/bin/env bash
# The test command: sets up .venv (ci/setup.sh), checks lint and format (ruff), builds the tests' other environments
# (ci/prebuild.sh), then runs the whole suite against real servers on loopback.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh
# lint and format first: a minute saved when the suite would fail on style anyway (ruff.toml)
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# no merge-conflict marker left in a tracked text file
MARKERS='^(<{7} |>{7} |={7}$)'
TEXT=('*.md' '*.py' '*.sh' '*.toml' '*.txt' '*.yml' '*.yaml' '*.json')
if git grep -qE "$MARKERS" -- "${TEXT[@]}"; then
  git grep -nE "$MARKERS" -- "${TEXT[@]}" >&2
  echo "merge-conflict markers in the tracked files above" >&2
  exit 1
fi
# the environments the tests run their clients in (the client suites' venvs, the JS clients, chromium, promtool),
# built here, each bounded and saying so, rather than inside a test's set-up where pytest-timeout's 600 s cut a slow
# build short (ci/prebuild.sh): with arguments, only what the tests they select need; BLINK_PREBUILD=0 skips it
if [ "${BLINK_PREBUILD:-1}" != 0 ]; then
  bash ci/prebuild.sh "$@"
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 TOKENIZERS_PARALLELISM=false
# two workers (pytest-xdist): a server starting, a client waiting or a browser loading leaves a core idle, so two
# files at a time fill the machine (one file, or the vLLM files together, per worker: conftest.py's `pytest_xdist_make_scheduler`);
# BLINK_TEST_WORKERS=0 runs everything in one process
exec .venv/bin/python -m pytest -n "${BLINK_TEST_WORKERS:-2}" --dist loadscope --no-loadscope-reorder "$@"
