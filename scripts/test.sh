#!/usr/bin/env bash
# Install everything the tests need, then run ruff and the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
bash scripts/install.sh --all
"$PY" -m pip install -q -e ".[test]"
# Test fixtures, installed the way a user installs any plugin (and only here, never by install.sh):
# a third-party plugin the plugin-system tests use, a model that writes a scripted reply (the server's
# tool-call and reasoning tests), and the example out-of-tree plugin (a platform, its attention backend and
# kernels, GPT-2 and GPT-NeoX models) that the conformance kit is run against.
"$PY" -m pip install -q -e tests/plugin_pkgs/testplugin -e tests/plugin_pkgs/scriptedmodel -e tests/plugin_pkgs/acme
"$PY" -m ruff check .
# Two passes: everything but the tests with wall-clock bounds, spread over $INFERCORE_TEST_WORKERS processes
# (default 2; one file per process at a time, so a file's session fixtures are built once per process);
# then the bounded ones alone, where no other test competes for the cores they time (and the two-node Ray
# cluster, whose actors died under a second test process's load).
# A pass that selects nothing (pytest's exit status 5, e.g. a path given with no bounded test in it) passes.
WORKERS=${INFERCORE_TEST_WORKERS:-2}
run_pass() { "$PY" -m pytest -q "$@" || [ $? -eq 5 ]; }
run_pass --durations=25 -n "$WORKERS" --dist loadfile -m "not serial" "$@"
run_pass --durations=10 -m serial "$@"
