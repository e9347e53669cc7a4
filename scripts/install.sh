#!/usr/bin/env bash
# Install infercore and its plugins (editable) into the current Python environment.
# torch goes first and pinned: an unpinned torch requirement would pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
"$PY" -m pip install -q --upgrade pip setuptools wheel
"$PY" -m pip install -q "torch==${INFERCORE_TORCH_VERSION:-2.13.0}"
"$PY" -m pip install -q -e ".[test]" -e plugins/cpu -e plugins/triton -e plugins/cuda -e plugins/rocm \
    -e plugins/xpu -e plugins/tool_parsers -e plugins/structured_output
# A third-party plugin the tests use, installed the way a user installs any plugin.
"$PY" -m pip install -q -e tests/plugin_pkgs/testplugin
# A test-only model that writes a scripted reply, for the server's tool-call and reasoning tests.
"$PY" -m pip install -q -e tests/plugin_pkgs/scriptedmodel
# The example out-of-tree plugin (a platform, its attention backend and kernels, a GPT-2 model) that
# the conformance kit is run against.
"$PY" -m pip install -q -e tests/plugin_pkgs/acme
