#!/usr/bin/env bash
# The single-GPU headline figures in one call of about 9 minutes: JSON lines on stdout and in $OUT/lines.jsonl,
# each step's stderr in $OUT/lines.log.
#   vl       scripts/gpu_qwen2_5_vl.py: Qwen2.5-VL-7B shape, 256 requests of one 448x448 image, against HF
#   wgpu     `infercore bench throughput --workload w-gpu --repeat 3` (the median is the line)
#   latency  `infercore bench latency` on the 0.6B (w-gpu) and 8B (w-gpu-8b) shapes
#   long     `infercore bench throughput --workload w-gpu-long` (32 prompts of 16-30k tokens) against its estimate
#   optins   the opt-in decode path against the default, 0.6B shape at batch 1, alternating (default,
#            INFERCORE_PDL=1), OPTIN_ROUNDS (2) rounds: whether each keeps its place
#   GPU: bash scripts/device_run.sh bash scripts/gpu_lines.sh      Knobs: PARTS ("vl wgpu latency"), TOTAL_S (540),
#   OPTIN_ROUNDS (2)
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
        long) step long 240 infercore bench throughput --workload w-gpu-long --no-progress ;;
        optins)
            for round in $(seq "${OPTIN_ROUNDS:-2}"); do
                for setting in default INFERCORE_PDL=1; do
                    # shellcheck disable=SC2086  # the setting is one NAME=VALUE word, or none
                    step "optin-$round-$setting" 60 env ${setting/default/} \
                        infercore bench latency --workload w-gpu
                done
            done ;;
        *) echo "{\"part\": \"$part\", \"skipped\": \"unknown part\"}" | tee -a "$RES" ;;
    esac
done
