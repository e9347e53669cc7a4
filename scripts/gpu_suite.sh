#!/usr/bin/env bash
# On the GPU machine (after scripts/device_run.sh has installed everything): the GPU tests and
# benchmarks in one go. JSON lines go to $OUT/results.jsonl, logs beside it.
#   run: bash scripts/device_run.sh bash scripts/gpu_suite.sh        (about 15 minutes on an H200: split it over two calls)
set -uo pipefail
OUT=${OUT:-/tmp/infercore-gpu}
mkdir -p "$OUT"
RES="$OUT/results.jsonl"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
step() { local limit=$1; shift; echo "== $*"; timeout "$limit" "$@"; echo "== exit $?"; }
# infercore's line is printed before HF starts, so a slow peer loses nothing of ours.
# Three timed runs in one engine (W-GPU runs vary by about 2% between device calls), then HF's
# generate_batch on all 256 requests (about 180 s on an H200).
step 420 infercore bench throughput --workload w-gpu --repeat 3 --compare-hf --no-progress \
    2>"$OUT/throughput.err" | tee -a "$RES"
step 80 infercore bench throughput --workload w-gpu --sync-scheduling --no-progress 2>"$OUT/sync.err" | tee -a "$RES"
step 60 infercore bench latency --workload w-gpu 2>"$OUT/latency.err" | tee -a "$RES"
step 60 python3 benchmarks/decode_attention.py 2>"$OUT/decode_attention.err" | tee -a "$RES"
step 120 python3 benchmarks/step_timeline.py --windows 2,20,600 --window-len 4 2>"$OUT/timeline.err" | tee -a "$RES"
step 150 python3 -m pytest -q -s -x tests/gpu/test_engine_oracle_gpu.py 2>&1 | tee "$OUT/gpu_oracle.log" \
    | grep -E '^\{|passed|failed|error' | tee -a "$RES"
step 400 python3 -m pytest -q tests/gpu -k "not oracle" 2>&1 | tee "$OUT/gpu_kernels.log" | tail -3
# The platform conformance kit against the CUDA platform and its Triton backend and kernels.
step 300 python3 -m pytest -q -p infercore.testing --infercore-platform cuda 2>&1 | tee "$OUT/conformance_cuda.log" \
    | tail -3
