#!/usr/bin/env bash
# Issue 16's serving acceptance in one call: `infercore serve` on the W-GPU model shape (dummy weights)
# loaded by `infercore bench serve`, next to the offline engine on the same requests. Every run's JSON
# line goes to stdout and $WORK/serving.jsonl (labels c1, c64, c256, sweep), logs beside it; at the end
# scripts/serving_verdict.py prints one JSON line with each criterion's ratio and pass flag. Where OUT is
# set (the GPU machine sets it), serving.jsonl, pyspy-summary.txt and an archive of WORK are copied there.
#   GPU: bash scripts/device_run.sh bash scripts/gpu_serving.sh          (about 6 minutes on an H200)
#   CPU dry run (tiny sizes, a few minutes): CPU_DRY_RUN=1 bash scripts/gpu_serving.sh
# Every step is bounded by `timeout` and by the whole run's budget (BUDGET_S, default 500 s); the server is always stopped.
# Knobs (environment): WORKLOAD, MODEL (a config-only folder), DTYPE, INPUT_LEN, OUTPUT_LEN, MAX_MODEL_LEN,
# N1/N64/N256 (requests at concurrency 1/C64/C256), C64, C256, SWEEP_RATES, SWEEP_N, PROBES (offline
# prefill probes), LOADS (which of c1 c64 c256 to run), SWEEP=0 (no Poisson sweep), GPU_UTIL, SERVE_EXTRA (more serve flags), ENGINE_EXTRA (more offline engine args, JSON
# members), API_SERVERS (--api-server-count), LATENCY=0 / THROUGHPUT=0 to skip those references, C64_RUNS
# (how many times the concurrency-64 load runs on the same server; the verdict takes the worst),
# C64_WORKERS / C256_WORKERS (bench serve client processes), LATENCY_MAX_NUM_SEQS (bench latency's max_num_seqs,
# a list; the last is the verdict's reference), PYSPY=1 (py-spy profiles of the server's processes under a concurrency-C256 load; PYSPY_SECONDS,
# PYSPY_NATIVE=0 for Python frames only), VERDICT=0 (no serving_verdict.py line: a part of scripts/gpu_two.sh).
# TRACE=1 runs only the latency trace instead (INFERCORE_TRACE_LATENCY=1, see
# core/infercore/engine/latency_trace.py): for each count in TRACE_API_SERVERS (default "1 4") a traced
# server takes N1 requests at concurrency 1 and N64 at C64; the per-stage p50/p99 of each (where the
# first token's time goes, each token's delay from stage to stage, the gaps at every stage) go to stdout
# and $WORK/trace.jsonl as JSON lines labelled c1-apiN / c64-apiN, after each run's bench serve line
# (about 4 minutes on an H200). TRACE_LOADS picks the loads among c1 c64 c256 (default "c1 c64"); each
# label's `occupancy` line says where the client's in-flight slots went.
set -uo pipefail
cd "$(dirname "$0")/.."
WORK=${WORK:-/tmp/infercore-serving}
DELIVER=(serving.jsonl pyspy-summary.txt trace.jsonl)
mkdir -p "$WORK"
RES="$WORK/serving.jsonl"
: >"$RES"
rm -f "$WORK"/pyspy-*
rm -rf "$WORK"/trace-api*
if [[ "${CPU_DRY_RUN:-0}" == 1 ]]; then
    # The same steps at toy sizes on the CPU platform: the W-CPU shape, short prompts, few requests.
    : "${WORKLOAD:=w-cpu}" "${DTYPE:=float32}" "${INPUT_LEN:=64}" "${OUTPUT_LEN:=8}" "${MAX_MODEL_LEN:=256}"
    : "${N1:=3}" "${N64:=16}" "${N256:=32}" "${C64:=4}" "${C256:=8}" "${SWEEP_N:=6}" "${PROBES:=3}"
    : "${WARM_N:=4}" "${THROUGHPUT:=0}" "${PYSPY_SECONDS:=4}" "${PYSPY_DELAY:=1}"
    : "${SERVE_EXTRA:=--num-gpu-blocks-override 256 --cpu-threads 1 --max-num-seqs 16}"
    : "${ENGINE_EXTRA:=\"num_gpu_blocks_override\": 256, \"cpu_threads\": 1, \"max_num_seqs\": 16}"
fi
BUDGET_S=${BUDGET_S:-500}
# shellcheck source=scripts/serving_lib.sh
source scripts/serving_lib.sh
WORKLOAD=${WORKLOAD:-w-gpu}
MODEL=${MODEL:-$WORK/$WORKLOAD-model}
DTYPE=${DTYPE:-bfloat16}
INPUT_LEN=${INPUT_LEN:-512}
OUTPUT_LEN=${OUTPUT_LEN:-256}
MAX_MODEL_LEN=${MAX_MODEL_LEN:-1024}
N1=${N1:-40}; N64=${N64:-256}; N256=${N256:-1024}; C64=${C64:-64}; C256=${C256:-256}
WARM_N=${WARM_N:-32}; SWEEP_N=${SWEEP_N:-128}; SWEEP_RATES=${SWEEP_RATES:-4 16 64}; PROBES=${PROBES:-20}
GPU_UTIL=${GPU_UTIL:-0.45}
PORT=${PORT:-8123}
URL="http://127.0.0.1:$PORT"
PYSPY=${PYSPY:-0}; PYSPY_SECONDS=${PYSPY_SECONDS:-15}; PYSPY_DELAY=${PYSPY_DELAY:-3}
PYSPY_BIN=$(command -v py-spy || true)
[[ -z "$PYSPY_BIN" && -x /tmp/site/bin/py-spy ]] && PYSPY_BIN=/tmp/site/bin/py-spy

# Record every server process for PYSPY_SECONDS (speedscope JSON, native frames too: the API server's time
# inside uvloop and the C extensions shows only so) after PYSPY_DELAY seconds of load. A process py-spy
# can't record that way is recorded without native frames, then gets a `py-spy dump` attempt (ptrace
# denied, ...). Never fails the run; each recorder is a process group the EXIT trap kills if still there.
start_profiles() {
    local pid role
    for pid in $(server_pids); do
        role=child; [[ "$pid" == "$SERVER" ]] && role=main
        # shellcheck disable=SC2016  # expanded by the inner shell
        setsid bash -c 'sleep "$1"; secs=$2; bin=$3; pid=$4; out=$5
            record() { timeout --foreground -k 5 $((secs + 30)) "$bin" record --pid "$pid" --rate 100 \
                --duration "$secs" --format speedscope --output "$out.speedscope.json" "$@" >>"$out.log" 2>&1; }
            if [[ "$6" == 1 ]]; then record --native || record; else record; fi ||
                timeout --foreground -k 5 20 "$bin" dump --pid "$pid" >"$out.dump.txt" 2>>"$out.log"' \
            profile "$PYSPY_DELAY" "$PYSPY_SECONDS" "$PYSPY_BIN" "$pid" "$WORK/pyspy-$role-$pid" "${PYSPY_NATIVE:-1}" &
        BACKGROUND_PIDS+=($!)
    done
}

echo "== model: $WORKLOAD shape in $MODEL, $DTYPE; prompts $INPUT_LEN, outputs $OUTPUT_LEN" >&2
if [[ ! -f "$MODEL/config.json" ]]; then
    python3 -c "import sys; from pathlib import Path; from infercore.benchmarks.workloads import WORKLOADS; \
WORKLOADS[sys.argv[1]].write_model_folder(Path(sys.argv[2]))" "$WORKLOAD" "$MODEL" || exit 1
fi

# Half the GPU for the server, so the offline engine of --offline-model fits beside it.
# shellcheck disable=SC2206  # SERVE_EXTRA is a list of flags
SERVE_FLAGS=(--load-format dummy --dtype "$DTYPE" --max-model-len "$MAX_MODEL_LEN" --skip-tokenizer-init
             --gpu-memory-utilization "$GPU_UTIL" --port "$PORT" --served-model-name "$WORKLOAD"
             --disable-log-requests ${SERVE_EXTRA:-})
BENCH=(infercore bench serve --base-url "$URL" --input-len "$INPUT_LEN" --output-len "$OUTPUT_LEN"
       --vocab-size "${VOCAB:-10000}" --no-progress)

# TRACE=1: one traced server per API server count, the TRACE_LOADS loads (default c1 c64), the per-stage
# figures; nothing else.
if [[ "${TRACE:-0}" == 1 ]]; then
    TRACE_RES="$WORK/trace.jsonl"
    : >"$TRACE_RES"
    export INFERCORE_TRACE_LATENCY=1
    tracing() { [[ " ${TRACE_LOADS:-c1 c64} " == *" $1 "* ]]; }
    for n in ${TRACE_API_SERVERS:-1 4}; do
        export INFERCORE_TRACE_LATENCY_DIR="$WORK/trace-api$n"
        start_server "$URL" "$WORK/serve-trace-api$n.log" "$MODEL" "${SERVE_FLAGS[@]}" --api-server-count "$n" \
            || continue
        step "trace-warmup-api$n" 60 "${BENCH[@]}" --num-prompts "$WARM_N" --max-concurrency "$WARM_N" \
            --seed 900 --label warmup >/dev/null 2>"$WORK/trace-warmup-api$n.err"
        tracing c1 && step "trace-c1-api$n" 60 "${BENCH[@]}" --num-prompts "$N1" --max-concurrency 1 --seed 1 \
            --label "c1-api$n" 2>"$WORK/trace-c1-api$n.err" | tee -a "$TRACE_RES"
        tracing c64 && step "trace-c64-api$n" 90 "${BENCH[@]}" --num-prompts "$N64" --max-concurrency "$C64" --seed 641 \
            --num-workers "$(workers "$C64" 2)" --label "c64-api$n" 2>"$WORK/trace-c64-api$n.err" \
            | tee -a "$TRACE_RES"
        tracing c256 && step "trace-c256-api$n" 120 "${BENCH[@]}" --num-prompts "$N256" --max-concurrency "$C256" --seed 256 \
            --num-workers "$(workers "$C256" "${C256_WORKERS:-6}")" --label "c256-api$n" \
            2>"$WORK/trace-c256-api$n.err" | tee -a "$TRACE_RES"
        stop_server  # the engine and API servers close their trace files
        for label in c1 c64 c256; do
            tracing "$label" || continue
            step "trace-report-$label-api$n" 90 python3 -m infercore.benchmarks.serve_trace \
                "$INFERCORE_TRACE_LATENCY_DIR" --label "$label-api$n" | tee -a "$TRACE_RES"
        done
    done
    unset INFERCORE_TRACE_LATENCY INFERCORE_TRACE_LATENCY_DIR
    echo "== done after ${SECONDS}s; trace figures in $TRACE_RES" >&2
    [[ -s "$TRACE_RES" ]]
    exit $?
fi

if [[ -n "${API_SERVERS:-}" ]]; then SERVE_FLAGS+=(--api-server-count "$API_SERVERS"); fi
start_server "$URL" "$WORK/serve.log" "$MODEL" "${SERVE_FLAGS[@]}" || exit 1
OFFLINE_ARGS="{\"load_format\": \"dummy\", \"dtype\": \"$DTYPE\", \"max_model_len\": $MAX_MODEL_LEN, \
\"skip_tokenizer_init\": true, \"gpu_memory_utilization\": $GPU_UTIL${ENGINE_EXTRA:+, $ENGINE_EXTRA}}"

# Warm-up (CUDA graphs, allocator), not reported. Every load sends prompts of its own seed: none finds an
# earlier load's prompts in the server's prefix cache (the offline engine, fresh, finds none either).
step warmup 60 "${BENCH[@]}" --num-prompts "$WARM_N" --max-concurrency "$WARM_N" --seed 900 >/dev/null 2>"$WORK/warmup.err"
# The loads to run (LOADS, default all three), each its own step.
wants() { [[ " ${LOADS:-c1 c64 c256} " == *" $1 "* ]]; }
# (c) single stream: TTFT and TPOT of one request at a time.
wants c1 && step c1 60 "${BENCH[@]}" --num-prompts "$N1" --max-concurrency 1 --seed 1 --label c1 2>"$WORK/c1.err" | tee -a "$RES"
# (b) concurrency 64: ITL p99 against TPOT p50, C64_RUNS times (default 1) on the same server; the
# verdict judges every run and reports the worst.
if wants c64; then
    for ((run = 1; run <= ${C64_RUNS:-1}; run++)); do
        step "c64-run$run" 90 "${BENCH[@]}" --num-prompts "$N64" --max-concurrency "$C64" --seed $((640 + run)) \
            --num-workers "$(workers "$C64" "${C64_WORKERS:-6}")" --label c64 2>>"$WORK/c64.err" | tee -a "$RES"
    done
fi
# (a) concurrency 256 next to the same requests through LLM.generate, whose engine then also times the
# batch-1 prefill of PROBES other prompts of the same length (the reference of c1's TTFT).
wants c256 && step c256 240 "${BENCH[@]}" --num-prompts "$N256" --max-concurrency "$C256" --seed 256 --num-workers "$(workers "$C256" "${C256_WORKERS:-6}")" \
    --offline-model "$MODEL" --offline-engine-args "$OFFLINE_ARGS" --offline-prefill-probes "$PROBES" \
    --label c256 2>"$WORK/c256.err" | tee -a "$RES"
# Profiles of the server's processes under the same load (a run of its own, so the profiler's pauses
# never touch a measured figure).
if [[ "$PYSPY" == 1 ]]; then
    if [[ -z "$PYSPY_BIN" ]]; then
        echo "== PYSPY=1 but py-spy is not installed; no profiles" >&2
    else
        start_profiles
        step c256-profiled 120 "${BENCH[@]}" --num-prompts "$N256" --max-concurrency "$C256" --seed 257 \
            --num-workers "$(workers "$C256" 4)" --label c256-profiled 2>"$WORK/c256-profiled.err" | tee -a "$RES"
        for pid in "${BACKGROUND_PIDS[@]}"; do wait "$pid" 2>/dev/null; done
        BACKGROUND_PIDS=()
    fi
fi
# (d) the Poisson sweep, one line per rate (SWEEP=0 skips it).
# shellcheck disable=SC2086  # SWEEP_RATES is a list
[[ "${SWEEP:-1}" == 1 ]] && step sweep 150 "${BENCH[@]}" --num-prompts "$SWEEP_N" --request-rate $SWEEP_RATES --seed 400 --num-workers "$(workers "$SWEEP_N" 2)" \
    --label sweep 2>"$WORK/sweep.err" | tee -a "$RES"
stop_server

# Offline references: batch-1 decode time per token of the same prompt length; the W-GPU throughput run.
if [[ "${LATENCY:-1}" == 1 ]]; then
    # LATENCY_MAX_NUM_SEQS: the engine sizes to compare with (the last is the verdict's reference; give
    # the server's own max_num_seqs there).
    for seqs in ${LATENCY_MAX_NUM_SEQS:-8 256}; do
        step "latency-seqs$seqs" 90 infercore bench latency --workload "$WORKLOAD" --input-len "$INPUT_LEN" \
            --output-len "$OUTPUT_LEN" --max-num-seqs "$seqs" 2>>"$WORK/latency.err" | tee -a "$RES"
    done
fi
if [[ "${THROUGHPUT:-1}" == 1 ]]; then
    step throughput 120 infercore bench throughput --workload "$WORKLOAD" --no-progress 2>"$WORK/throughput.err" \
        | tee -a "$RES"
fi

if [[ "$PYSPY" == 1 ]]; then
    shopt -s nullglob
    profiles=("$WORK"/pyspy-*.speedscope.json)
    if ((${#profiles[@]})); then
        python3 scripts/pyspy_summary.py "${profiles[@]}" >"$WORK/pyspy-summary.txt" 2>&1
        echo "== py-spy: ${#profiles[@]} profiles; top functions in pyspy-summary.txt" >&2
        head -12 "$WORK/pyspy-summary.txt" >&2
    else
        echo "== no py-spy profile was written; see $WORK/pyspy-*.log and any $WORK/pyspy-*.dump.txt" >&2
        tail -5 "$WORK"/pyspy-*.log >&2 2>/dev/null
    fi
fi
if [[ "${VERDICT:-1}" == 0 ]]; then
    # A part of a larger run (scripts/gpu_two.sh): no verdict; success is a result line written.
    echo "== done after ${SECONDS}s; results in $RES" >&2
    [[ -s "$RES" ]]
    exit $?
fi
python3 scripts/serving_verdict.py "$RES" | tee -a "$RES"
verdict=${PIPESTATUS[0]}
echo "== done after ${SECONDS}s; results in $RES" >&2
exit "$verdict"
