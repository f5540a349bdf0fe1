#!/usr/bin/env bash
# Sets everything up (idempotent) and runs the whole test suite against the real models.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/python -m pytest -q "$@"
