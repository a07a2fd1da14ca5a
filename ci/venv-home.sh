# Sourced by ci/setup.sh and ci/*-venv.sh: where a test environment lives. A venv is built once per set of pins,
# outside the checkout, in ${BLINK_CI_CACHE:-~/.cache/blink-ci}/venvs/NAME-KEY (KEY: a hash of the scripts and pin
# files that decide its contents, and of the Python that builds it), and the checkout's .venv or .venv-NAME is a
# link to it: a fresh clone of an unchanged tree reuses every venv (minutes saved; the vLLM and ZeroGPU venvs take
# ~6 min each to build), a changed pin builds a new one beside the old, and a new machine builds them all.
# A .venv or .venv-NAME that is a real folder (built in place), or a link made by hand, is used as it is.

# venv_home LINK FILE...: sets V to the folder the venv LINK is built in, linking LINK to it, and holds a lock on
# that folder until the calling script exits, so that two runs never build the same venv at once. (Not called in
# $(...): the lock would go with the subshell.)
venv_home() {
  local link=$1 cache key dir
  shift
  cache=${BLINK_CI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/blink-ci}/venvs
  # a venv built in place, or linked by hand to one elsewhere: used as it is
  if [ -e "$link" ] && [[ "$(readlink "$link")" != "$cache"/* ]]; then
    V=$link
    return
  fi
  key=$( {
    cat "$@"
    "${PYTHON:-python3}" -c 'import platform, sys; print(sys.version, sys.executable, platform.machine())'
  } | sha256sum | cut -c1-12)
  dir=$cache/${link#.}-$key
  mkdir -p "$dir"
  exec 9>"$dir.lock"
  flock 9
  touch "$dir" # its time is its last use: venv_ready keeps the three used last
  ln -sfn "$dir" "$link"
  V=$dir
}

# venv_ready DIR: marks the venv built, and removes the builds of the same venv past the three used last.
venv_ready() {
  local dir=$1 base old
  touch "$dir/.ready"
  case "$dir" in */venvs/*-????????????) ;; *) return 0 ;; esac
  base=${dir%-*}
  # shellcheck disable=SC2012 # names are ours: NAME-KEY, no spaces
  for old in $(ls -dt "$base"-???????????? 2>/dev/null | tail -n +4); do
    rm -rf "$old" "$old.lock"
  done
}
