#!/usr/bin/env bash
# Finds promtool for the /metrics lint in ci/tests/test_metrics.py and prints its path: the one on PATH if there is
# one, else the one unpacked from Debian's prometheus package into ~/.cache/blink-ci/promtool (BLINK_CI_CACHE
# moves ~/.cache/blink-ci). The package is fetched with `apt-get download` and unpacked with `dpkg-deb -x`:
# nothing is installed, no service is enabled, no dpkg lock is taken. Only when apt's lists do not have the package
# yet does it run `apt-get update` first (root or sudo). Idempotent; exits non-zero when promtool cannot be had.
set -euo pipefail
if command -v promtool >/dev/null 2>&1; then
  command -v promtool
  exit 0
fi
DIR=${BLINK_CI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/blink-ci}/promtool
BIN=$DIR/promtool
mkdir -p "$DIR"
exec 9>"$DIR.lock" # one at a time: two test workers (ci/test.sh runs two) may both need it
flock 9
if [ ! -x "$BIN" ]; then
  WORK=$(mktemp -d "$DIR/fetch.XXXXXX")
  trap 'rm -rf "$WORK"' EXIT
  if ! (cd "$WORK" && apt-get download -qq prometheus) >&2; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq >&2
    (cd "$WORK" && apt-get download -qq prometheus) >&2
  fi
  dpkg-deb -x "$WORK"/prometheus_*.deb "$WORK/unpacked"
  # only the one binary is kept (48 MB; the package unpacks to ~100 MB)
  mv "$WORK/unpacked/usr/bin/promtool" "$BIN.part"
  mv "$BIN.part" "$BIN"
fi
"$BIN" --version >/dev/null
echo "$BIN"
