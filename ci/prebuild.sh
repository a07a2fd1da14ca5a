#!/usr/bin/env bash
# Builds the environments the tests run their clients in, before pytest (ci/test.sh calls it after ci/setup.sh):
# the client suites' venvs (ci/*-venv.sh), the JS clients (npm ci in ci/js and ci/js/inspector) and the system
# tools two tests fetch (chromium, promtool). On a new machine they take minutes each; built inside a test's set-up
# they ran past pytest-timeout's 600 s on a busy machine and read as test errors. Here each is bounded (`timeout`,
# its whole process group) and says what it is doing and for how long, so a slow network or a busy CPU is a message
# about the build; the tests find them ready (each keeps its own build-on-first-use for a test run without this).
#
#   bash ci/prebuild.sh                      # everything the whole suite needs
#   bash ci/prebuild.sh ci/tests/test_x.py   # only what the tests these pytest arguments select need (ci/test.sh
#                                            # passes its own): a test file's own; `-m vllm` .venv-vllm and -router
#   BLINK_PREBUILD=0 bash ci/test.sh ...     # skip it (ci/test.sh); BLINK_PREBUILD_JOBS=1 builds one at a time
#
# Two at a time by default (the large downloads, vLLM's and ZeroGPU's CUDA torch, in one lane; the rest in another):
# pip waits on the network much of the time, so two builds fill a 2-core machine without overloading it. A venv that
# fails or runs past its bound stops the run (exit 1) with the tail of its log (ci/artifacts/prebuild/NAME.log); a
# system tool that cannot be had (apt needs root) is a warning: the tests that need it say so themselves.
set -euo pipefail
cd "$(dirname "$0")/.."
LOGS=ci/artifacts/prebuild
mkdir -p "$LOGS"
# Ctrl-C or a TERM stops the builds too: `timeout` runs each in a process group of its own, which the terminal's
# signal does not reach, so it is handed on (a TERM to `timeout` stops its whole group)
CHILD=
FIRST=
stop() {
  [ -z "$CHILD" ] || kill -TERM "$CHILD" 2>/dev/null || true
  [ -z "$FIRST" ] || kill -TERM "$FIRST" 2>/dev/null || true
  echo "ci: stopped: the builds under way are stopped too" >&2
  exit 130
}
trap stop INT TERM

# NAME|LANE|BOUND_S|HARD|WHAT|COMMAND|USERS (the test files that need it; a glob is allowed)
STEPS=(
  ".venv-vllm|1|2400|hard|a CPU build of vLLM|bash ci/vllm-venv.sh|test_router.py test_vllm.py test_run_batch_vllm.py test_vllm_serve.py"
  ".venv-zerogpu|1|2400|hard|CUDA torch and spaces, ~5.6 GB|bash ci/zerogpu-venv.sh|test_space_zerogpu.py test_space_zerogpu_charge.py"
  ".venv-lmeval|2|1800|hard|lm-eval|bash ci/lmeval-venv.sh|test_loglikelihood.py"
  ".venv-labels|2|1200|hard|LiteLLM, LlamaIndex, Open WebUI's reranker|bash ci/labels-venv.sh|test_rerank.py test_moderations.py test_decision_clients.py test_examples.py"
  ".venv-clients|2|1200|hard|TypeSafe's decision clients|bash ci/clients-venv.sh|test_decision_clients.py"
  ".venv-genai|2|600|hard|google-genai|bash ci/genai-venv.sh|test_gemini.py"
  ".venv-mcp|2|600|hard|the mcp 2 client|bash ci/mcp-venv.sh|test_examples.py"
  ".venv-router|2|600|hard|vllm-router|bash ci/router-venv.sh|test_router.py"
  "ci/js/node_modules|2|600|hard|the JS clients, npm ci|npm_ci ci/js|test_ai_sdk.py test_conformance.py test_space_mcp.py test_examples.py"
  "ci/js/inspector/node_modules|2|900|hard|the MCP inspector, npm ci|npm_ci ci/js/inspector|test_space_mcp.py"
  "chromium|2|900|soft|chromium and chromedriver, apt|bash ci/browser-setup.sh|test_space_browser*.py"
  "promtool|2|600|soft|promtool from Debian's package|bash ci/promtool-setup.sh|test_metrics.py"
)

# npm_ci FOLDER: `npm ci` there unless its node_modules already hold every pinned version (the tests' own check,
# helpers.npm_installed, under its lock)
npm_ci() {
  .venv/bin/python -c 'import sys; sys.path.insert(0, "ci/tests"); from helpers import npm_installed; from pathlib import Path; npm_installed(Path(sys.argv[1]), timeout=10**6)' "$1"
}

# the test files pytest selects with these arguments (named ones as they are, else its own --collect-only, for -k, -m
# and folders alike), as base names;
# "all" when there are none (the whole suite), nothing when it selects none
selected() {
  local ids arg files=()
  if [ $# -eq 0 ]; then
    echo all
    return
  fi
  for arg in "$@"; do # test files alone (ids too) need no collection: their names are the answer
    [[ -f ${arg%%::*} && $arg == *.py* ]] || break
    files+=("$(basename "${arg%%::*}")")
  done
  if [ ${#files[@]} -eq $# ]; then
    echo "${files[@]}"
    return
  fi
  ids=$(HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 .venv/bin/python -m pytest --collect-only -q -p no:cacheprovider \
    "$@" -n 0 2>/dev/null || true)
  grep -oE '^[^:[:space:]]+[.]py::' <<<"$ids" | sed 's/::$//; s|.*/||' | sort -u | paste -sd' ' || true
}

# needed USERS SELECTED: whether a step whose users are USERS is needed by SELECTED
needed() {
  local users=$1 selected=$2 user file
  [ "$selected" = all ] && return 0
  for user in $users; do
    for file in $selected; do
      # shellcheck disable=SC2053 # a user may be a glob
      [[ "$file" == $user ]] && return 0
    done
  done
  return 1
}

# step LINE: runs one step bounded, saying what it does; non-zero when a hard step failed
step() {
  local name lane bound hard what command users start pid rc verb log next
  IFS='|' read -r name lane bound hard what command users <<<"$1"
  log=$LOGS/$(basename "$name").log
  [[ $name == .venv* ]] && log=$LOGS/${name#.}.log
  verb=building
  if [[ $name == .venv* && -f $name/.ready ]] || [[ $name != .venv* && -e $name ]]; then
    verb=checking
  fi
  echo "ci: $verb $name ($what, for $users; at most ${bound} s)…"
  start=$SECONDS
  # shellcheck disable=SC2086 # the command is words
  timeout -k 30 "$bound" bash -c "$(declare -f npm_ci); $command" >"$log" 2>&1 &
  pid=$!
  CHILD=$pid
  next=$((start + 60))
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    if [ "$SECONDS" -ge "$next" ] && kill -0 "$pid" 2>/dev/null; then
      echo "ci:   still $verb $name: $((SECONDS - start)) s of at most ${bound} s"
      next=$((next + 60))
    fi
  done
  rc=0
  wait "$pid" || rc=$?
  if [ "$rc" -eq 0 ]; then
    echo "ci: $name ready ($((SECONDS - start)) s)"
    return 0
  fi
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    echo "ci: $verb $name ran past its ${bound} s bound and was stopped (a slow network or a busy machine?);" \
      "its log: $log" >&2
  else
    echo "ci: $verb $name failed (exit $rc) after $((SECONDS - start)) s; its log: $log" >&2
  fi
  tail -n 30 "$log" | sed "s|^|ci:   $name: |" >&2
  if [ "$hard" = soft ]; then
    echo "ci: going on without $name: the tests that need it ($users) will say why" >&2
    return 0
  fi
  return 1
}

# lane N SELECTED: the lane's steps one after another, every one tried; non-zero when one failed
lane() {
  local line failed=0 lane users
  trap stop TERM # in the background, a lane hears the script's TERM only through this
  for line in "${STEPS[@]}"; do
    lane=$(cut -d'|' -f2 <<<"$line")
    users=$(cut -d'|' -f7 <<<"$line")
    if [ "$1" = any ] || [ "$lane" = "$1" ]; then
      needed "$users" "$2" || continue
      step "$line" || failed=1
    fi
  done
  return "$failed"
}

SELECTED=$(selected "$@")
if [ "$SELECTED" != all ]; then
  echo "ci: building what the selected test files need (${SELECTED:-none selected})"
fi
start=$SECONDS
rc=0
if [ "${BLINK_PREBUILD_JOBS:-2}" -le 1 ]; then
  lane any "$SELECTED" || rc=1
else
  lane 1 "$SELECTED" &
  FIRST=$!
  lane 2 "$SELECTED" || rc=1
  wait "$FIRST" || rc=1
fi
if [ "$rc" -ne 0 ]; then
  echo "ci: an environment the tests need could not be built (above): no test run" >&2
  exit 1
fi
echo "ci: the tests' environments are ready ($((SECONDS - start)) s)"
