#!/usr/bin/env bash
# On the GPU machine (through scripts/device_run.sh): the pooling GPU tests, then the w-gpu-embed benchmark
# (BERT-large and Qwen3-Embedding-0.6B shapes beside sentence-transformers in one run). Results in $OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
timeout 300 python3 -m pytest -q tests/gpu/test_pooling_gpu.py 2>&1 | tail -5 | tee "$OUT/pooling_gpu_tests.txt"
timeout 480 infercore bench throughput --workload w-gpu-embed --no-progress "$@" | tee "$OUT/embed.jsonl"
