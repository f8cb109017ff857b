#!/usr/bin/env bash
# Runs the test suite under every Python interpreter found among 3.11, 3.12 and 3.13,
# each in its own virtual environment (.venv-pyX.Y), and prints one line per version.
# Not part of CI's default run (CI runs the README's test command on one Python).
#
#   bash scripts/test-pythons.sh            # the whole suite
#   bash scripts/test-pythons.sh -m "not slow"   # extra arguments go to pytest
set -uo pipefail
cd "$(dirname "$0")/.."
find_python() {  # on PATH, or installed by pyenv but not selected
  local version=$1 candidate
  for candidate in "$(command -v "python$version" 2>/dev/null)" \
                   "$(pyenv root 2>/dev/null)"/versions/"$version".*/bin/"python$version"; do
    if [ -n "$candidate" ] && [ -x "$candidate" ] && "$candidate" -c "" 2>/dev/null; then
      echo "$candidate"
      return
    fi
  done
}

summary=()
for version in 3.11 3.12 3.13; do
  python="$(find_python "$version")"
  if [ -z "$python" ]; then
    summary+=("python$version: not installed here")
    continue
  fi
  venv=".venv-py$version"
  log="$venv.log"
  echo "== python$version: installing into $venv (log: $log)"
  if ! { "$python" -m venv "$venv" && "$venv/bin/pip" install -q -e ".[test]"; } >"$log" 2>&1; then
    summary+=("python$version: install failed (see $log)")
    continue
  fi
  echo "== python$version: $("$venv/bin/python" -c 'import pandas, apache_beam, tensorflow as tf; print("pandas", pandas.__version__, "beam", apache_beam.__version__, "tensorflow", tf.__version__)' 2>/dev/null)"
  "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@" | tee -a "$log" | tail -n 3
  result="$(tail -n 1 "$log")"
  summary+=("python$version: $result")
done
echo
printf '%s\n' "${summary[@]}"
