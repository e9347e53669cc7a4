#!/usr/bin/env bash
# On the GPU machine: install the carried wheelhouse and our distributions, then run "$@".
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
python3 -m pip install -q --no-deps --no-build-isolation -e . -e plugins/cpu -e plugins/triton -e plugins/cuda
export PYTHONUNBUFFERED=1
"$@"
