#!/usr/bin/env bash
# Install infercore (editable) and the plugins a user of this machine would pick into the current Python
# environment: the CPU platform, the tool-call/reasoning parsers, the grammar backends, and the GPU
# platform (with the Triton kernels) of the GPUs found here. `--all` installs every in-tree plugin.
# Test fixtures are not installed here: scripts/test.sh adds them.
# torch goes first and pinned: an unpinned torch requirement would pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
ALL=0
for arg in "$@"; do
    case "$arg" in
        --all) ALL=1 ;;
        -h|--help) echo "usage: scripts/install.sh [--all]   (--all: every in-tree plugin, for every platform)"; exit 0 ;;
        *) echo "scripts/install.sh: unknown option '$arg'; the only option is --all" >&2; exit 2 ;;
    esac
done
plugins=(cpu tool_parsers structured_output)
if [ "$ALL" = 1 ]; then
    plugins+=(triton cuda rocm xpu)
elif command -v nvidia-smi >/dev/null 2>&1; then
    plugins+=(triton cuda)
elif command -v rocm-smi >/dev/null 2>&1 || [ -e /dev/kfd ]; then
    plugins+=(triton rocm)
elif command -v xpu-smi >/dev/null 2>&1 || command -v sycl-ls >/dev/null 2>&1; then
    plugins+=(triton xpu)
fi
"$PY" -m pip install -q --upgrade pip setuptools wheel
"$PY" -m pip install -q "torch==${INFERCORE_TORCH_VERSION:-2.13.0}"
editables=(-e .)
for plugin in "${plugins[@]}"; do editables+=(-e "plugins/$plugin"); done
"$PY" -m pip install -q "${editables[@]}"
echo "installed infercore and plugins: ${plugins[*]}"
