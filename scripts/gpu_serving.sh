#!/usr/bin/env bash
# On the GPU machine (after scripts/device_run.sh has installed everything): `infercore serve` on the
# W-GPU model shape (dummy weights, bf16) loaded by `infercore bench serve`, next to the offline engine
# on the same requests, in one call. JSON lines go to stdout and $OUT/serving.jsonl, logs beside it.
#   run: bash scripts/device_run.sh bash scripts/gpu_serving.sh        (about 6 minutes on an H200)
# API_SERVERS=N serves with --api-server-count N where that flag exists.
set -uo pipefail
OUT=${OUT:-/tmp/infercore-gpu}
mkdir -p "$OUT"
RES="$OUT/serving.jsonl"
PORT=${PORT:-8123}
URL="http://127.0.0.1:$PORT"
MODEL="$OUT/w-gpu-model"
step() { local limit=$1; shift; echo "== $*" >&2; timeout "$limit" "$@"; echo "== exit $?" >&2; }
python3 -c "from pathlib import Path; from infercore.benchmarks.workloads import WORKLOADS; \
WORKLOADS['w-gpu'].write_model_folder(Path('$MODEL'))"

# Half the GPU for the server, so the offline engine of --offline-model fits beside it.
SERVE_FLAGS=(--load-format dummy --dtype bfloat16 --max-model-len 1024 --skip-tokenizer-init
             --gpu-memory-utilization 0.45 --port "$PORT" --served-model-name w-gpu --disable-log-requests)
if [[ -n "${API_SERVERS:-}" ]]; then SERVE_FLAGS+=(--api-server-count "$API_SERVERS"); fi
infercore serve "$MODEL" "${SERVE_FLAGS[@]}" >"$OUT/serve.log" 2>&1 &
SERVER=$!
trap 'kill -INT $SERVER 2>/dev/null; wait $SERVER' EXIT
for _ in $(seq 240); do
    curl -sf "$URL/health" >/dev/null && break
    kill -0 $SERVER 2>/dev/null || { echo "server exited:"; tail -30 "$OUT/serve.log"; exit 1; }
    sleep 1
done

BENCH=(infercore bench serve --base-url "$URL" --input-len 512 --output-len 256 --vocab-size 10000 --no-progress)
OFFLINE_ARGS='{"load_format": "dummy", "dtype": "bfloat16", "max_model_len": 1024, "skip_tokenizer_init": true, "gpu_memory_utilization": 0.45}'
# Warm-up (CUDA graphs, allocator), not reported.
step 60 "${BENCH[@]}" --num-prompts 32 --max-concurrency 32 >/dev/null 2>"$OUT/warmup.err"
step 60 "${BENCH[@]}" --num-prompts 20 --max-concurrency 1 2>"$OUT/c1.err" | tee -a "$RES"
step 90 "${BENCH[@]}" --num-prompts 256 --max-concurrency 64 --num-workers 2 2>"$OUT/c64.err" | tee -a "$RES"
# Concurrency 256 next to the same 1,024 requests through LLM.generate (online_over_offline >= 0.9).
step 240 "${BENCH[@]}" --num-prompts 1024 --max-concurrency 256 --num-workers 4 --offline-model "$MODEL" \
    --offline-engine-args "$OFFLINE_ARGS" 2>"$OUT/c256.err" | tee -a "$RES"
# The Poisson sweep; its table is the last lines of sweep.err.
step 120 "${BENCH[@]}" --num-prompts 128 --request-rate 4 16 64 --num-workers 2 2>"$OUT/sweep.err" | tee -a "$RES"
grep '^|' "$OUT/sweep.err"
kill -INT $SERVER; wait $SERVER; trap - EXIT
# Offline references: batch-1 prefill and decode time of the same prompt length, and the W-GPU throughput run.
step 90 infercore bench latency --workload w-gpu --input-len 512 --output-len 256 2>"$OUT/latency.err" | tee -a "$RES"
step 120 infercore bench throughput --workload w-gpu --no-progress 2>"$OUT/throughput.err" | tee -a "$RES"
