#!/usr/bin/env bash
# #36's c = 256 line in one call (about 4 minutes on an H100): W-GPU-8B's 256 requests through `bench throughput`
# without speculation, then with an EAGLE-3 head, a 0.6B-shape draft model and full n-gram drafts, each k = 3 at
# forced acceptance 0.7 and `disable_by_batch_size` at its default (32), then the plain run again (the noise).
# SHARED_KV="0 1" runs each speculative engine twice, with INFERCORE_VERIFY_SHARED_KV=0 and =1 (verification and
# draft catch-up attention reading each row's context once for all of its query tokens, the default); default "1".
# With PROFILE=1, scripts/gpu_spec_steps.py then times every engine step (busy vs small, and the small steps' mean
# milliseconds by running count) and profiles a window of small steps (the tail, where speculation runs).
#   GPU: bash scripts/device_run.sh bash scripts/gpu_spec_c256.sh
# Knobs (environment): WORKLOAD, DRAFT_WORKLOAD, NUM_REQUESTS, SHARED_KV, METHODS (default "eagle3 draft_model
# bench_ngram_full") (a CPU dry run: WORKLOAD=w-cpu DRAFT_WORKLOAD=w-cpu NUM_REQUESTS=64).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/infercore-spec-c256}
mkdir -p "$OUT"
FOLDERS=$(python -m infercore.benchmarks.spec_folders /tmp/infercore-spec-models "${WORKLOAD:-w-gpu-8b}" "${DRAFT_WORKLOAD:-w-gpu}") || exit 1
DRAFT=$(python -c 'import json,sys; print(json.loads(sys.argv[1])["draft"])' "$FOLDERS")
HEAD=$(python -c 'import json,sys; print(json.loads(sys.argv[1])["eagle3"])' "$FOLDERS")
BENCH=(infercore bench throughput --workload "${WORKLOAD:-w-gpu-8b}" --num-requests "${NUM_REQUESTS:-256}" --no-progress --prompt-period 64)
# run ARGS...: one JSON line with the figures that matter here (the whole line goes to $OUT/c256.jsonl).
run() {
    timeout 150 "${BENCH[@]}" "$@" 2>/dev/null | tail -1 | tee -a "$OUT/c256.jsonl" | python -c '
import json, sys
d = json.loads(sys.stdin.read())
import os
keys = ("output_tok_s", "wall_s", "speculative_config", "spec_num_drafts", "spec_mean_accepted_length")
print(json.dumps({"shared_kv": os.environ.get("INFERCORE_VERIFY_SHARED_KV", "1"), **{k: d.get(k) for k in keys}}))'
}
spec() { echo "{\"method\": \"$1\", \"num_speculative_tokens\": 3${2:+, \"model\": \"$2\"}}"; }
run
for method in ${METHODS:-eagle3 draft_model bench_ngram_full}; do
    case "$method" in
        eagle3) config=$(spec eagle3 "$HEAD") ;;
        draft_model) config=$(spec draft_model "$DRAFT") ;;
        *) config=$(spec "$method") ;;
    esac
    for shared in ${SHARED_KV:-1}; do
        INFERCORE_VERIFY_SHARED_KV=$shared run --speculative-config "$config" --benchmark-acceptance-rate 0.7
    done
done
run
if [[ "${PROFILE:-0}" == 1 ]]; then
    INFERCORE_VERIFY_SHARED_KV=${SHARED_KV##* } timeout 240 python scripts/gpu_spec_steps.py --methods eagle3,draft_model \
        --window small+6,8 2>&1 | grep '^{'
fi
