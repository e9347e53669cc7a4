#!/usr/bin/env bash
# The single-GPU headline figures in one call of about 9 minutes: JSON lines on stdout and in $OUT/lines.jsonl,
# each step's stderr in $OUT/lines.log.
#   vl       scripts/gpu_qwen2_5_vl.py: Qwen2.5-VL-7B shape, 256 requests of one 448x448 image, against HF
#   wgpu     `infercore bench throughput --workload w-gpu --repeat 3` (the median is the line)
#   latency  `infercore bench latency` on the 0.6B (w-gpu) and 8B (w-gpu-8b) shapes
#   GPU: bash scripts/device_run.sh bash scripts/gpu_lines.sh      Knobs: PARTS ("vl wgpu latency"), TOTAL_S (540)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/infercore-lines}
mkdir -p "$OUT"
RES="$OUT/lines.jsonl"
LOG="$OUT/lines.log"
PARTS=${PARTS:-"vl wgpu latency"}
PARTS=${PARTS//,/ }
TOTAL_S=${TOTAL_S:-540}
STEP_TAG=1
source scripts/step_lib.sh  # RES and LOG started empty; START, left, step, device_line
device_line
for part in $PARTS; do
    case $part in
        vl) step vl 300 python3 scripts/gpu_qwen2_5_vl.py ;;
        wgpu) step wgpu 200 infercore bench throughput --workload w-gpu --repeat 3 --no-progress ;;
        latency)
            for w in w-gpu w-gpu-8b; do
                step "latency-$w" 60 infercore bench latency --workload "$w"
            done ;;
        *) echo "{\"part\": \"$part\", \"skipped\": \"unknown part\"}" | tee -a "$RES" ;;
    esac
done
