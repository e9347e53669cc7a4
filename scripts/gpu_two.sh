#!/usr/bin/env bash
# Issue 39 on two GPUs: tensor, data, pipeline and expert parallelism measured, JSON lines out.
# PARTS picks what runs, in the order given (default "tp8b latency tests"):
#   tp8b      benchmarks/parallel_throughput.py, Qwen3-8B shape, W-GPU requests: LAYOUTS_8B (tp1,tp2,dp2)
#   latency   infercore bench latency on w-gpu-8b at each of LATENCY_TP (1 2)
#   tests     the two-GPU tests, TESTS (tp pp ep dpep) naming
#             tests/gpu/test_{tensor,pipeline,expert,dp_expert}_parallel_gpu.py
#   moe       benchmarks/parallel_throughput.py, Qwen3-30B-A3B shape (w-gpu-moe): LAYOUTS_MOE (tp1,pp2,ep2)
#   serve     scripts/gpu_serving.sh (LOADS=c256 only, 512 in / 256 out, SERVE_N requests) for each of
#             SERVE_LAYOUTS (dp2 tp2): `infercore serve` against the same requests offline
#   baselines the TP=1 runs alone (tp8b tp1, moe tp1, latency TP=1): what one GPU can do
#   summary   (always last) the ratios against the issue's targets and a Markdown table
# Two calls on nvidia-h200-x2 (each bounded by TOTAL_S; a step that no longer fits is skipped with a line
# saying so, for a third call with PARTS/TESTS naming just those):
#   bash scripts/device_run.sh env PARTS="tp8b latency tests" TESTS="tp ep" bash scripts/gpu_two.sh
#   bash scripts/device_run.sh env PARTS="moe serve tests" TESTS="pp dpep" bash scripts/gpu_two.sh
# One GPU: bash scripts/device_run.sh env PARTS=baselines bash scripts/gpu_two.sh
# CPU dry run (tiny shapes, gloo, a few requests; GPU tests skip): CPU_DRY_RUN=1 bash scripts/gpu_two.sh
# Every step runs under `timeout`, never past TOTAL_S (default 520 s, so the install fits in a 10-minute
# call); a failed or timed-out step is a JSON line ("status": failed/timeout with its log's tail) and the
# next step still runs. Results:
# $OUT/two.jsonl (every JSON line, each with its "step"), $OUT/two-logs.tar.gz (each step's log); stdout
# gets the same lines. Knobs: PARTS, TOTAL_S, LAYOUTS_8B, LAYOUTS_MOE, LATENCY_TP, TESTS, SERVE_LAYOUTS,
# SERVE_N, SERVE_WORKLOAD (w-gpu-8b), TEST_MIN_S, GPUS (devices; default: nvidia-smi's count, 2 in the dry run).
set -uo pipefail
cd "$(dirname "$0")/.."
START=$SECONDS
TOTAL_S=${TOTAL_S:-520}
END=$((START + TOTAL_S))
OUT=${OUT:-/tmp/infercore-two}
WORK=$(mktemp -d /tmp/infercore-two-work.XXXXXX)
mkdir -p "$OUT" "$WORK/logs"
RES="$OUT/two.jsonl"
: >"$RES"
PARTS=${PARTS:-tp8b latency tests}
DRY=${CPU_DRY_RUN:-0}
REPORT=(python3 scripts/gpu_two_report.py)

if [[ -z "${GPUS:-}" ]]; then
    if [[ "$DRY" == 1 ]]; then GPUS=2
    else GPUS=$( (nvidia-smi -L 2>/dev/null || true) | grep -c '^GPU'); fi
fi
if [[ "$DRY" == 1 ]]; then
    # Tiny shapes on the CPU platform: one torch thread per worker, a small KV cache, a few short requests.
    export INFERCORE_CPU_THREADS=1
    PT_ARGS=(--num-requests 4 --input-len 16 --output-len 8 --dtype float32 --max-model-len 128
             --engine-arg num_gpu_blocks_override=64)
    SHAPE_8B=tiny; SHAPE_MOE=tiny-moe
    LAT_ARGS=(--workload w-cpu --input-len 16 --output-len 4 --repeats 1)
    SERVE_ENV=(CPU_DRY_RUN=1 WORKLOAD=w-cpu N256="${SERVE_N:-16}" C256=8 WARM_N=2 PROBES=0 GPU_UTIL=0.45)
    SERVE_BASE="--num-gpu-blocks-override 256 --cpu-threads 1 --max-num-seqs 16"
    ENGINE_BASE='"num_gpu_blocks_override": 256, "cpu_threads": 1, "max_num_seqs": 16'
else
    PT_ARGS=()
    SHAPE_8B=qwen3-8b; SHAPE_MOE=qwen3-30b-a3b
    LAT_ARGS=(--workload w-gpu-8b)
    SERVE_ENV=(WORKLOAD="${SERVE_WORKLOAD:-w-gpu-8b}" N256="${SERVE_N:-512}" C256=256 WARM_N=32 PROBES=0)
    SERVE_BASE=""
    ENGINE_BASE=""
fi

note() { echo "== [$((SECONDS - START))s] $*" >&2; }
# status STEP STATUS [JSON members]: a line about a step itself.
status() {
    local line="{\"step\": \"$1\", \"status\": \"$2\", \"at_s\": $((SECONDS - START))${3:+, $3}}"
    echo "$line" | tee -a "$RES"
}

# step NAME LIMIT CMD...: CMD's JSON lines tagged with NAME into RES (and stdout), its other output into
# logs/NAME.log; at most LIMIT seconds and never past TOTAL_S (less a reserve for the report). Skipped
# with a line saying so when less than STEP_MIN seconds (default 20) are left.
step() {
    local name=$1 limit=$2; shift 2
    local left=$((END - SECONDS - 15)) log="$WORK/logs/$name.log"
    if ((left < ${STEP_MIN:-20})); then
        status "$name" skipped "\"reason\": \"${left}s of the ${TOTAL_S}s budget left, ${STEP_MIN:-20}s needed\""
        return 0
    fi
    ((limit > left)) && limit=$left
    note "$name (at most ${limit}s): $*"
    local began=$SECONDS
    timeout -k 15 "$limit" "$@" 2>>"$log" </dev/null | "${REPORT[@]}" tag "$name" 2>>"$log" | tee -a "$RES"
    local rc=${PIPESTATUS[0]} took=$((SECONDS - began))
    note "$name: exit $rc after ${took}s"
    if ((rc == 0)); then status "$name" ok "\"seconds\": $took"; return 0; fi
    local kind=failed tail
    ((rc == 124 || rc == 137)) && kind=timeout
    tail=$(tail -n 15 "$log" 2>/dev/null | python3 -c 'import json, sys; print(json.dumps(sys.stdin.read()[-2500:]))')
    status "$name" "$kind" "\"rc\": $rc, \"seconds\": $took, \"log_tail\": $tail"
}

# needs_two NAME: true with two devices; otherwise a skipped line.
needs_two() {
    ((GPUS >= 2)) && return 0
    status "$1" skipped "\"reason\": \"needs 2 GPUs, $GPUS here\""
    return 1
}

throughput() {  # throughput NAME SHAPE LAYOUTS LIMIT
    step "$1" "$4" python3 benchmarks/parallel_throughput.py --shape "$2" --layouts "$3" --max-devices "$GPUS" \
        "${PT_ARGS[@]}"
}

latency() {  # latency TP...
    local tp
    for tp in "$@"; do
        if ((tp > GPUS)); then status "latency-tp$tp" skipped "\"reason\": \"needs $tp GPUs, $GPUS here\""; continue; fi
        step "latency-tp$tp" 150 infercore bench latency "${LAT_ARGS[@]}" --tensor-parallel-size "$tp"
    done
}

tests() {
    # A test file cut short tells nothing: one starts only with TEST_MIN_S (default 150) seconds left.
    local name file STEP_MIN=${TEST_MIN_S:-150}
    needs_two tests || return 0
    for name in ${TESTS:-tp pp ep dpep}; do
        case $name in
            tp) file=tests/gpu/test_tensor_parallel_gpu.py ;;
            pp) file=tests/gpu/test_pipeline_parallel_gpu.py ;;
            ep) file=tests/gpu/test_expert_parallel_gpu.py ;;
            dpep) file=tests/gpu/test_dp_expert_parallel_gpu.py ;;
            *) status "tests-$name" skipped "\"reason\": \"unknown test set (tp pp ep dpep)\""; continue ;;
        esac
        step "tests-$name" 300 python3 -m pytest -q -s -p no:cacheprovider "$file" --junitxml "$WORK/$name.xml"
        # A step skipped (budget) or killed before pytest wrote its report has its own line already.
        [[ -f "$WORK/$name.xml" ]] && "${REPORT[@]}" junit "tests-$name" "$WORK/$name.xml" | tee -a "$RES"
    done
}

serve() {
    local layout flags engine size limit
    for layout in ${SERVE_LAYOUTS:-dp2 tp2}; do
        size=${layout#??}
        case $layout in
            dp*) flags="--data-parallel-size $size"; engine="\"data_parallel_size\": $size" ;;
            tp*) flags="--tensor-parallel-size $size"; engine="\"tensor_parallel_size\": $size" ;;
            *) status "serve-$layout" skipped "\"reason\": \"serve layouts are tpN or dpN\""; continue ;;
        esac
        if ((size > GPUS)); then status "serve-$layout" skipped "\"reason\": \"needs $size GPUs, $GPUS here\""; continue; fi
        # gpu_serving.sh stops its server (a session of its own, out of timeout's reach) within its own
        # budget, well inside this step's.
        limit=$((END - SECONDS - 15)); ((limit > 300)) && limit=300
        if ((limit < 100)); then status "serve-$layout" skipped "\"reason\": \"the ${TOTAL_S}s budget is spent\""; continue; fi
        step "serve-$layout" 300 env "${SERVE_ENV[@]}" OUT= WORK="$WORK/serve-$layout" BUDGET_S=$((limit - 45)) \
            LOADS=c256 SWEEP=0 LATENCY=0 THROUGHPUT=0 VERDICT=0 PORT="${PORT:-8123}" \
            SERVE_EXTRA="${SERVE_BASE:+$SERVE_BASE }$flags" ENGINE_EXTRA="${ENGINE_BASE:+$ENGINE_BASE, }$engine" \
            bash scripts/gpu_serving.sh
    done
}

finish() {
    "${REPORT[@]}" summary "$RES" 2>"$WORK/logs/summary.md" | tee -a "$RES"
    cat "$WORK/logs/summary.md" >&2
    # shellcheck disable=SC2046  # the serve folders, one word each
    tar -czf "$OUT/two-logs.tar.gz" --exclude='*-model' -C "$WORK" logs \
        $(cd "$WORK" && ls -d serve-* 2>/dev/null) 2>/dev/null
    rm -rf "$WORK"
}
trap finish EXIT
trap 'exit 130' INT TERM

NAMES=cpu
[[ "$DRY" == 1 ]] || NAMES=$( (nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null || true) \
    | paste -sd ';' | tr -d '"')
status start ok "\"parts\": \"$PARTS\", \"gpus\": $GPUS, \"devices\": \"$NAMES\", \"cpu_dry_run\": $DRY, \"total_s\": $TOTAL_S"
for part in $PARTS; do
    case $part in
        tp8b) throughput tp8b "$SHAPE_8B" "${LAYOUTS_8B:-tp1,tp2,dp2}" 330 ;;
        latency) latency ${LATENCY_TP:-1 2} ;;
        tests) tests ;;
        moe) throughput moe "$SHAPE_MOE" "${LAYOUTS_MOE:-tp1,pp2,ep2}" 360 ;;
        serve) serve ;;
        baselines)
            throughput tp8b "$SHAPE_8B" tp1 150
            throughput moe "$SHAPE_MOE" tp1 180
            latency 1 ;;
        *) status "$part" skipped "\"reason\": \"unknown part (tp8b latency tests moe serve baselines)\"" ;;
    esac
done
