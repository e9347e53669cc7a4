#!/usr/bin/env bash
# Multi-LoRA speed on one H200 (dummy weights; random rank-RANK PEFT adapters on all seven projections,
# written on the fly in a temp dir), through benchmarks/lora.py. One JSON line per measurement on stdout
# and in $OUT/lora.jsonl:
#   tests        tests/gpu/test_lora_gpu.py: lora_apply vs the torch reference at W-GPU and 8B projection
#                sizes (1..2048 tokens), the engine with graphs vs HF + PEFT
#   kernels      lora_apply (Triton) vs its torch reference at the W-GPU and the 8B shapes' projections:
#                max error, µs per call replayed from a graph and eager, GB/s, the reference's µs, the base
#                GEMM's µs (8 adapters, every token with one)
#   fused        decode-sized steps (1 and 8 tokens), the two-launch path against the fused kernel at the W-GPU
#                and 8B projections, ranks 16 and 64 (benchmarks/lora_fused.py: µs each, errors against the
#                reference, fused settings swept at W-GPU rank 16); writes the launch table
#                $OUT/lora_fused_table.json, which the later parts of the same call use
#                (INFERCORE_LORA_FUSED_TABLE)
#   latency      batch-1 decode, base then one adapter, same call (as `infercore bench latency`: best of
#                REPEATS, ms per output token; target lora/base <= 1.15), W-GPU shape
#   latency8b    the same on the 8B shape
#   throughput   W-GPU's 256 requests, base then 8 adapters spread evenly (request i runs adapter i % 8),
#                same call (as `infercore bench throughput`; target lora/base >= 0.85)
#   throughput8b the same on the 8B shape
# Each setting runs in a process of its own. The last line of latency/throughput parts is the ratio.
#   GPU: bash scripts/device_run.sh bash scripts/gpu_lora.sh          (PARTS default: all but the 8B
#        engine runs; split into <= 10-minute calls, e.g.)
#        env PARTS="tests kernels" TOTAL_S=580 bash scripts/gpu_lora.sh
#        env PARTS="latency throughput" TOTAL_S=580 bash scripts/gpu_lora.sh
#        env PARTS="latency8b throughput8b" TOTAL_S=580 bash scripts/gpu_lora.sh
#        env PARTS="fused latency" TOTAL_S=240 bash scripts/gpu_lora.sh   (the fused kernel, then its latency)
#   CPU dry run (2-layer shapes, no kernels part): CPU_DRY_RUN=1 PARTS="latency throughput" bash scripts/gpu_lora.sh
# Knobs (environment): PARTS (space- or comma-separated), TOTAL_S (the whole call's budget; each part gets
# what is left, at most STEP_S), STEP_S, FUSED_S (the fused part's cap), FUSED_ARGS (more arguments of
# benchmarks/lora_fused.py, e.g. "--workloads w-gpu"), RANK, REPEATS, OUTPUT_LEN, INPUT_LEN, NUM_ADAPTERS,
# KERNEL_TOKENS.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/infercore-lora}
mkdir -p "$OUT"
RES="$OUT/lora.jsonl"
PARTS=${PARTS:-"tests kernels latency throughput"}
PARTS=${PARTS//,/ }
TOTAL_S=${TOTAL_S:-1800}
STEP_S=${STEP_S:-420}
RANK=${RANK:-16}
REPEATS=${REPEATS:-3}
INPUT_LEN=${INPUT_LEN:-128}
OUTPUT_LEN=${OUTPUT_LEN:-256}
NUM_ADAPTERS=${NUM_ADAPTERS:-8}
KERNEL_TOKENS=${KERNEL_TOKENS:-1,8,16,64,256,2048}
FUSED_S=${FUSED_S:-150}
FUSED_ARGS=${FUSED_ARGS:-}
EXTRA=()
if [[ "${CPU_DRY_RUN:-0}" == 1 ]]; then
    EXTRA=(--tiny --num-requests 16)
    OUTPUT_LEN=16
    REPEATS=1
fi
START=$(date +%s)
left() { echo $((TOTAL_S - ($(date +%s) - START))); }
step() {  # step NAME CMD...: runs CMD for at most min(STEP_S, what is left of TOTAL_S), JSON lines to $RES
    local name=$1; shift
    local budget; budget=$(left)
    (( budget > STEP_S )) && budget=$STEP_S
    if (( budget < 30 )); then
        echo "{\"part\": \"$name\", \"skipped\": \"TOTAL_S=$TOTAL_S spent\"}" | tee -a "$RES"
        return
    fi
    echo "== $name ($budget s): $*" >&2
    timeout "$budget" "$@" | tee -a "$RES"
    local rc=${PIPESTATUS[0]}
    echo "== $name exit $rc after $(( $(date +%s) - START )) s" >&2
    (( rc == 0 )) || echo "{\"part\": \"$name\", \"exit\": $rc}" | tee -a "$RES"
}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader >&2 || true
for part in $PARTS; do
    case $part in
        tests)
            step tests python3 -m pytest -q -p no:cacheprovider tests/gpu/test_lora_gpu.py ;;
        kernels)
            for w in w-gpu w-gpu-8b; do
                step "kernels-$w" python3 benchmarks/lora.py kernels --workload "$w" --rank "$RANK" \
                    --num-adapters "$NUM_ADAPTERS" --kernel-tokens "$KERNEL_TOKENS"
            done ;;
        fused)  # at most FUSED_S: the table is rewritten after each (workload, rank) group, W-GPU rank 16 first
            STEP_S_ALL=$STEP_S; STEP_S=$FUSED_S
            # shellcheck disable=SC2086
            step fused python3 benchmarks/lora_fused.py --table-out "$OUT/lora_fused_table.json" $FUSED_ARGS
            STEP_S=$STEP_S_ALL
            [[ -s "$OUT/lora_fused_table.json" ]] && export INFERCORE_LORA_FUSED_TABLE="$OUT/lora_fused_table.json" ;;
        latency|latency8b)
            w=w-gpu; [[ $part == latency8b ]] && w=w-gpu-8b
            step "$part" python3 benchmarks/lora.py latency --workload "$w" --rank "$RANK" --repeat "$REPEATS" \
                --input-len "$INPUT_LEN" --output-len "$OUTPUT_LEN" --max-num-seqs 8 "${EXTRA[@]}" ;;
        throughput|throughput8b)
            w=w-gpu; [[ $part == throughput8b ]] && w=w-gpu-8b
            step "$part" python3 benchmarks/lora.py throughput --workload "$w" --rank "$RANK" \
                --num-adapters "$NUM_ADAPTERS" "${EXTRA[@]}" ;;
        *)
            echo "{\"part\": \"$part\", \"error\": \"unknown part\"}" | tee -a "$RES" ;;
    esac
done
echo "results: $RES" >&2
