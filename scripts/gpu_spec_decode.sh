#!/usr/bin/env bash
# Speculative decoding on the 8B shape (w-gpu-8b, dummy weights): `bench latency` at batch 1 and
# `bench throughput`, without speculation and with drafts (k in KS) at forced acceptance rates (RATES,
# the rejection sampler's benchmark-only switch; every rate of one k runs in one engine). METHOD picks
# the proposer:
#   bench_ngram_full  the n-gram lookup topped up to k drafts per row (default; random weights repeat
#                     little, so the plain n-gram proposer would rarely draft);
#   ngram             the n-gram proposer as it is, with prompts of a repeated span (PROMPT_PERIOD);
#   draft_model       a draft of DRAFT_WORKLOAD's shape (w-gpu: Qwen3-0.6B's), dummy weights too;
#   eagle3            an EAGLE-3 head of the target's shape (32000-token draft vocabulary, dummy weights).
# PART=c256 runs `bench throughput` with 256 requests (W-GPU-8B's) three ways: without speculation,
# with METHOD at disable_by_batch_size's default (32), and with it null (speculation at every batch size).
# One JSON line per run goes to stdout and $OUT/spec_decode.jsonl; each line carries the draft counters. Last, a
# {"part": "table", ...} line (scripts/spec_table.py: every method and k against the plain runs, Markdown on stderr;
# with BASELINE=0 run it over both calls' files).
#   GPU: bash scripts/device_run.sh bash scripts/gpu_spec_decode.sh
#        one part per call (each step is bounded by STEP_S; a call by the machine's 10 minutes), e.g.
#        env PART=latency METHOD=eagle3; env PART=latency METHOD=draft_model BASELINE=0;
#        env PART=latency METHOD=bench_ngram_full BASELINE=0 RATES=0;
#        env PART=throughput METHOD=eagle3 KS=3 DISABLE=null (speculation at every batch size; the default
#        32 turns it off for most of W-GPU-8B's 256 requests); ... KS=4 BASELINE=0 DISABLE=null;
#        env PART=c256 METHOD=eagle3; env PART=c256 METHOD=draft_model BASELINE=0
#   CPU dry run (tiny sizes): CPU_DRY_RUN=1 METHOD=draft_model bash scripts/gpu_spec_decode.sh
# Knobs (environment): PART (latency | throughput | both | c256, default both), METHOD, KS (spaces or commas), RATES
# (comma-separated), BASELINE=0 (skip the runs without speculation), DISABLE (disable_by_batch_size for
# latency/throughput runs: unset = default, "null" = never), BACKOFF=0 (disable_by_acceptance null: no request
# pauses drafting however few drafts land, the raw cost of verifying), PROMPT_PERIOD, WORKLOAD, DRAFT_WORKLOAD,
# INPUT_LEN, OUTPUT_LEN, REPEATS, NUM_REQUESTS (throughput), STEP_S.
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
    : "${WORKLOAD:=w-cpu}" "${DRAFT_WORKLOAD:=w-cpu}" "${INPUT_LEN:=64}" "${OUTPUT_LEN:=16}" "${REPEATS:=1}"
    : "${NUM_REQUESTS:=8}" "${KS:=3}"
    EXTRA=(--max-num-seqs 8)
else
    EXTRA=()
fi
KS=${KS:-"3 4 5"}
KS=${KS//,/ }  # "3,4,5" as "3 4 5": one engine per k either way
WORKLOAD=${WORKLOAD:-w-gpu-8b}
DRAFT_WORKLOAD=${DRAFT_WORKLOAD:-w-gpu}
INPUT_LEN=${INPUT_LEN:-512}
OUTPUT_LEN=${OUTPUT_LEN:-256}
REPEATS=${REPEATS:-3}
NUM_REQUESTS=${NUM_REQUESTS:-256}
STEP_S=${STEP_S:-300}
FOLDERS=$(python -m infercore.benchmarks.spec_folders "$OUT/spec_models" "$WORKLOAD" "$DRAFT_WORKLOAD") || exit 1
DRAFT_DIR=$(python -c 'import json,sys; print(json.loads(sys.argv[1])["draft"])' "$FOLDERS")
HEAD_DIR=$(python -c 'import json,sys; print(json.loads(sys.argv[1])["eagle3"])' "$FOLDERS")
step() { local limit=$1; shift; echo "== $*" >&2; timeout "$limit" "$@" | tee -a "$RES"; echo "== exit ${PIPESTATUS[0]}" >&2; }
# spec K [DISABLE]: the --speculative-config JSON of METHOD with k drafts (DISABLE: a number or null).
spec() {
    local model="" disable=""
    case "$METHOD" in
        draft_model) model=", \"model\": \"$DRAFT_DIR\"" ;;
        eagle3) model=", \"model\": \"$HEAD_DIR\"" ;;
    esac
    [[ -n "${2:-}" ]] && disable=", \"disable_by_batch_size\": $2"
    [[ "${BACKOFF:-1}" == 0 ]] && disable="$disable, \"disable_by_acceptance\": null"
    echo "{\"method\": \"$METHOD\", \"num_speculative_tokens\": $1$model$disable}"
}
if [[ "$PART" == latency || "$PART" == both ]]; then
    [[ "${BASELINE:-1}" == 1 ]] && step "$STEP_S" infercore bench latency --workload "$WORKLOAD" \
        --input-len "$INPUT_LEN" --output-len "$OUTPUT_LEN" --repeats "$REPEATS" --prompt-period "$PROMPT_PERIOD"
    for k in $KS; do
        step "$STEP_S" infercore bench latency --workload "$WORKLOAD" --input-len "$INPUT_LEN" \
            --output-len "$OUTPUT_LEN" --repeats "$REPEATS" --prompt-period "$PROMPT_PERIOD" \
            --speculative-config "$(spec "$k" "${DISABLE:-}")" --benchmark-acceptance-rate "$RATES"
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
            --prompt-period "$PROMPT_PERIOD" --speculative-config "$(spec "$k" "${DISABLE:-}")" \
            --benchmark-acceptance-rate "$RATES" "${EXTRA[@]}"
    done
fi
if [[ "$PART" == c256 ]]; then
    k=${KS%% *}
    C256_RATE=${C256_RATE:-0.7}
    [[ "${BASELINE:-1}" == 1 ]] && step "$STEP_S" infercore bench throughput --workload "$WORKLOAD" \
        --num-requests "$NUM_REQUESTS" --no-progress --prompt-period "$PROMPT_PERIOD" "${EXTRA[@]}"
    step "$STEP_S" infercore bench throughput --workload "$WORKLOAD" --num-requests "$NUM_REQUESTS" --no-progress \
        --prompt-period "$PROMPT_PERIOD" --speculative-config "$(spec "$k")" \
        --benchmark-acceptance-rate "$C256_RATE" "${EXTRA[@]}"
    step "$STEP_S" infercore bench throughput --workload "$WORKLOAD" --num-requests "$NUM_REQUESTS" --no-progress \
        --prompt-period "$PROMPT_PERIOD" --speculative-config "$(spec "$k" null)" \
        --benchmark-acceptance-rate "$C256_RATE" "${EXTRA[@]}"
fi
python3 scripts/spec_table.py "$RES" | tee -a "$RES"  # the k x rate tables against this call's plain runs
echo "results: $RES" >&2
