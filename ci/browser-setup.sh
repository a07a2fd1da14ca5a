#!/usr/bin/env bash
# Installs what the real-browser UI test (ci/tests/test_space_browser.py) needs: Debian's chromium and
# chromium-driver (apt), and selenium (pinned in ci/requirements.txt) in .venv. Idempotent; needs root for apt.
set -euo pipefail
cd "$(dirname "$0")/.."
# one at a time: two test workers (ci/test.sh runs two) may both open a browser first
exec 9>"${TMPDIR:-/tmp}/blink-browser-setup.lock"
flock 9
if ! command -v chromium >/dev/null 2>&1 || [ ! -x /usr/bin/chromedriver ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends chromium chromium-driver
fi
if ! .venv/bin/python -c "import selenium" 2>/dev/null; then
  .venv/bin/pip install -q "$(grep -E '^selenium==' ci/requirements.txt)"
fi
