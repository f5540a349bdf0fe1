#!/usr/bin/env bash
# Sets everything up (idempotent) and opens specem-chat on the configured ensemble
# (the built-in demo trio unless a models.toml says otherwise).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/specem-chat "$@"
