#!/usr/bin/env bash
# Install everything the tests need, then run ruff and the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
PY=${PYTHON:-python3}
"$PY" -m ruff check .
"$PY" -m pytest -q --durations=25 "$@"
