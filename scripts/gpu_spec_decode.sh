#!/usr/bin/env bash
# Speculative decoding on the 8B shape (w-gpu-8b, dummy weights): `bench latency` at batch 1 and
# `bench throughput`, without speculation and with n-gram drafts (k in KS) at forced acceptance rates
# (RATES, the rejection sampler's benchmark-only switch; every rate of one k runs in one engine).
# Drafts come from `bench_ngram_full` (the n-gram lookup topped up to k drafts per row: with random
# weights the plain n-gram proposer drafts only where the model repeats itself; METHOD=ngram runs it
# as it is, with prompts of a repeated span, PROMPT_PERIOD). One JSON line per run goes to stdout and
# $OUT/spec_decode.jsonl; each line carries the draft counters the engine measured.
#   GPU: bash scripts/device_run.sh bash scripts/gpu_spec_decode.sh
#        one part per call (each step is bounded by STEP_S; a call by the machine's 10 minutes):
#        env PART=latency; env PART=throughput KS=3; env PART=throughput KS=4 BASELINE=0; ... KS=5 BASELINE=0
#   CPU dry run (tiny sizes): CPU_DRY_RUN=1 bash scripts/gpu_spec_decode.sh
# Knobs (environment): PART (latency | throughput | both, default both), KS, RATES (comma-separated),
# BASELINE=0 (skip the runs without speculation), METHOD, PROMPT_PERIOD, WORKLOAD, INPUT_LEN, OUTPUT_LEN, REPEATS, NUM_REQUESTS (throughput), STEP_S.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/infercore-spec-decode}
mkdir -p "$OUT"
RES="$OUT/spec_decode.jsonl"
PART=${PART:-both}
RATES=${RATES:-0,0.5,0.7,0.9}
METHOD=${METHOD:-bench_ngram_full}
PROMPT_PERIOD=${PROMPT_PERIOD:-64}
if [[ "${CPU_DRY_RUN:-0}" == 1 ]]; then
    : "${WORKLOAD:=w-cpu}" "${INPUT_LEN:=64}" "${OUTPUT_LEN:=16}" "${REPEATS:=1}" "${NUM_REQUESTS:=8}" "${KS:=3}"
    EXTRA=(--max-num-seqs 8)
else
    EXTRA=()
fi
KS=${KS:-"3 4 5"}
WORKLOAD=${WORKLOAD:-w-gpu-8b}
INPUT_LEN=${INPUT_LEN:-512}
OUTPUT_LEN=${OUTPUT_LEN:-256}
REPEATS=${REPEATS:-3}
NUM_REQUESTS=${NUM_REQUESTS:-256}
STEP_S=${STEP_S:-300}
step() { local limit=$1; shift; echo "== $*" >&2; timeout "$limit" "$@" | tee -a "$RES"; echo "== exit ${PIPESTATUS[0]}" >&2; }
spec() { echo "{\"method\": \"$METHOD\", \"num_speculative_tokens\": $1}"; }
if [[ "$PART" == latency || "$PART" == both ]]; then
    [[ "${BASELINE:-1}" == 1 ]] && step "$STEP_S" infercore bench latency --workload "$WORKLOAD" \
        --input-len "$INPUT_LEN" --output-len "$OUTPUT_LEN" --repeats "$REPEATS" --prompt-period "$PROMPT_PERIOD"
    for k in $KS; do
        step "$STEP_S" infercore bench latency --workload "$WORKLOAD" --input-len "$INPUT_LEN" \
            --output-len "$OUTPUT_LEN" --repeats "$REPEATS" --prompt-period "$PROMPT_PERIOD" \
            --speculative-config "$(spec "$k")" --benchmark-acceptance-rate "$RATES"
    done
fi
if [[ "$PART" == throughput || "$PART" == both ]]; then
    if [[ "${BASELINE:-1}" == 1 ]]; then
        step "$STEP_S" infercore bench throughput --workload "$WORKLOAD" --num-requests "$NUM_REQUESTS" --no-progress \
            --prompt-period "$PROMPT_PERIOD" "${EXTRA[@]}"
        step "$STEP_S" infercore bench throughput --workload "$WORKLOAD" --num-requests "$NUM_REQUESTS" --no-progress \
            --prompt-period "$PROMPT_PERIOD" --sync-scheduling "${EXTRA[@]}"
    fi
    for k in $KS; do
        step "$STEP_S" infercore bench throughput --workload "$WORKLOAD" --num-requests "$NUM_REQUESTS" --no-progress \
            --prompt-period "$PROMPT_PERIOD" --speculative-config "$(spec "$k")" \
            --benchmark-acceptance-rate "$RATES" "${EXTRA[@]}"
    done
fi
echo "results: $RES" >&2
