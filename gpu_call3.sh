#!/usr/bin/env bash
set -uo pipefail
R=$OUT/results.jsonl
L=$OUT/log.txt
step() { local limit=$1; shift; echo "== $*" | tee -a $L; timeout "$limit" "$@"; echo "== exit $?" | tee -a $L; }
inst() { python3 -m pip install -q --no-deps --no-build-isolation -e "$1" -e "$1/plugins/cpu" -e "$1/plugins/triton" -e "$1/plugins/cuda" >/dev/null 2>&1; echo "installed $1"; }
step 230 python3 benchmarks/startup.py --workload w-gpu-8b --serve-workload w-gpu --runs 2 2>>$L | tee -a $R
inst .old
step 110 infercore bench throughput --workload w-gpu --repeat 3 --no-progress 2>>$L | sed 's/^{/{"tree": "old", /' | tee -a $R
step 45 infercore bench latency --workload w-gpu 2>>$L | sed 's/^{/{"tree": "old", /' | tee -a $R
inst .
step 100 infercore bench throughput --workload w-gpu --repeat 3 --no-progress 2>>$L | sed 's/^{/{"tree": "new", /' | tee -a $R
step 45 infercore bench latency --workload w-gpu 2>>$L | sed 's/^{/{"tree": "new", /' | tee -a $R
step 50 infercore bench latency --workload w-gpu-8b-fp8 2>>$L | tee -a $R
grep -h '^{' $R | cut -c1-400
