#!/usr/bin/env bash
set -uo pipefail
R=$OUT/results.jsonl
step() { local limit=$1; shift; echo "== $*"; timeout "$limit" "$@"; echo "== exit $?"; }
inst() { python3 -m pip install -q --no-deps --no-build-isolation -e "$1" -e "$1/plugins/cpu" -e "$1/plugins/triton" -e "$1/plugins/cuda" >/dev/null 2>&1; echo "installed $1"; }
inst .old
step 120 infercore bench throughput --workload w-gpu --repeat 3 --no-progress 2>$OUT/old_tp.err | sed 's/^{/{"tree": "old", /' | tee -a $R
step 50 infercore bench latency --workload w-gpu 2>$OUT/old_lat.err | sed 's/^{/{"tree": "old", /' | tee -a $R
inst .
step 100 infercore bench throughput --workload w-gpu --repeat 3 --no-progress 2>$OUT/new_tp.err | sed 's/^{/{"tree": "new", /' | tee -a $R
step 50 infercore bench latency --workload w-gpu 2>$OUT/new_lat.err | sed 's/^{/{"tree": "new", /' | tee -a $R
step 60 infercore bench latency --workload w-gpu-8b 2>$OUT/lat_8b.err | tee -a $R
step 60 infercore bench latency --workload w-gpu-8b-fp8 2>$OUT/lat_fp8.err | tee -a $R
step 60 infercore bench latency --workload w-gpu-8b-awq 2>$OUT/lat_awq.err | tee -a $R
step 60 infercore bench latency --workload w-gpu-8b-gptq 2>$OUT/lat_gptq.err | tee -a $R
step 60 python3 benchmarks/int4_gemm.py 2>$OUT/int4_gemm.err | tee -a $R
step 70 python3 -m pytest -q -x tests/gpu/test_int4_gpu.py 2>&1 | tail -5
