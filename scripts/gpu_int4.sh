#!/usr/bin/env bash
# INT4 (W4A16, group 128) speed on one H200 in one call, dummy weights. JSON lines on stdout and in
# $OUT/int4.jsonl; the launch table in $OUT/int4_table.json; logs in $OUT/int4.log.
#   sweep        benchmarks/int4_sweep.py: the W4A16 paths' settings at the 8B shape's projections, M 1..256,
#                512 and 2048, against cuBLAS bf16 (µs, GB/s); writes the table and the dense threshold, which
#                every later part reads through INFERCORE_INT4_TABLE
#   latency      `infercore bench latency` on w-gpu-8b then w-gpu-8b-awq (target INT4 >= 2.5x bf16)
#   throughput   `infercore bench throughput` on w-gpu-8b-awq then w-gpu-8b, W-GPU's 256 requests or NUM_REQUESTS
#                (target >= 1.0x)
#   gptq         `infercore bench latency` on w-gpu-8b-gptq (last: the same kernels as AWQ's, other zeros)
#   tests        tests/gpu/test_int4_gpu.py (the op against the reference at the 8B shapes; not in the default)
# Each step runs under `timeout` (at most STEP_S, and what is left of TOTAL_S); a failed or skipped step
# prints a JSON line saying so and the rest still run. The last lines are the ratios.
#   GPU: bash scripts/device_run.sh bash scripts/gpu_int4.sh        (about 4 minutes; if the engine runs
#        leave parts skipped, a second call can reuse the first one's table, copied into the worktree:
#        env TABLE_IN=int4_table.json PARTS="sweep throughput gptq" bash scripts/device_run.sh bash scripts/gpu_int4.sh)
# Knobs (environment): PARTS, TOTAL_S (220), STEP_S (90), SWEEP_BUDGET_S (65), ROWS, OUTPUT_LEN (128),
# REPEATS (2), NUM_REQUESTS (the workload's 256), TABLE_IN (a launch table to use instead of sweeping).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/infercore-int4}
mkdir -p "$OUT"
RES="$OUT/int4.jsonl"
LOG="$OUT/int4.log"
: >"$RES"
PARTS=${PARTS:-"sweep latency throughput gptq"}
PARTS=${PARTS//,/ }
TOTAL_S=${TOTAL_S:-220}
STEP_S=${STEP_S:-90}
SWEEP_BUDGET_S=${SWEEP_BUDGET_S:-65}
ROWS=${ROWS:-1,2,4,8,16,32,64,128,256,512,2048}
OUTPUT_LEN=${OUTPUT_LEN:-128}
REPEATS=${REPEATS:-2}
NUM_REQUESTS=${NUM_REQUESTS:-}
REQ=(); [[ -n $NUM_REQUESTS ]] && REQ=(--num-requests "$NUM_REQUESTS")
TABLE="$OUT/int4_table.json"
START=$(date +%s)
left() { echo $((TOTAL_S - ($(date +%s) - START))); }
step() {  # step NAME CMD...: CMD for at most min(STEP_S, what is left), its JSON lines to $RES, tagged NAME
    local name=$1; shift
    local budget; budget=$(left)
    (( budget > STEP_S )) && budget=$STEP_S
    if (( budget < 20 )); then
        echo "{\"part\": \"$name\", \"skipped\": \"TOTAL_S=$TOTAL_S spent\"}" | tee -a "$RES"
        return
    fi
    echo "== $name ($budget s): $*" >>"$LOG"
    timeout "$budget" "$@" 2>>"$LOG" | grep --line-buffered '^{' | sed -u "s/^{/{\"part\": \"$name\", /" \
        | tee -a "$RES"
    local rc=${PIPESTATUS[0]}
    echo "== $name exit $rc after $(( $(date +%s) - START )) s" >>"$LOG"
    (( rc == 0 )) || echo "{\"part\": \"$name\", \"exit\": $rc, \"timed_out\": $([[ $rc == 124 ]] && echo true || echo false)}" | tee -a "$RES"
}
ratio() {  # ratio NAME KEY BASE_PART PART: PART's KEY over BASE_PART's (inverted for ms/token)
    python3 - "$RES" "$@" <<'EOF' | tee -a "$RES"
import json, sys
path, name, key, base, part = sys.argv[1:6]
rows = [json.loads(line) for line in open(path) if line.startswith("{")]
def value(p):
    found = [r[key] for r in rows if r.get("part") == p and isinstance(r.get(key), (int, float))]
    return found[-1] if found else None
b, v = value(base), value(part)
speedup = None if not b or not v else round((b / v) if "ms" in key else (v / b), 3)
print(json.dumps({"part": "ratio", "name": name, "key": key, "base": b, "value": v, "speedup_vs_bf16": speedup}))
EOF
}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader >>"$LOG" 2>&1 || true
for part in $PARTS; do
    case $part in
        sweep)
            if [[ -n ${TABLE_IN:-} && -s $TABLE_IN ]]; then  # a table an earlier call wrote: no sweep
                cp "$TABLE_IN" "$TABLE"
                export INFERCORE_INT4_TABLE=$TABLE
                echo "{\"part\": \"sweep\", \"table\": \"$TABLE_IN\", \"note\": \"given, not swept\"}" | tee -a "$RES"
                continue
            fi
            step sweep python3 benchmarks/int4_sweep.py --table "$TABLE" --rows "$ROWS" --budget-s "$SWEEP_BUDGET_S"
            if [[ -s $TABLE ]]; then
                export INFERCORE_INT4_TABLE=$TABLE
            else
                echo "{\"part\": \"sweep\", \"table\": null, \"note\": \"defaults used\"}" | tee -a "$RES"
            fi ;;
        latency)
            for w in w-gpu-8b w-gpu-8b-awq; do
                step "latency-$w" infercore bench latency --workload "$w" --output-len "$OUTPUT_LEN" --repeats "$REPEATS"
            done ;;
        gptq)
            step latency-w-gpu-8b-gptq infercore bench latency --workload w-gpu-8b-gptq --output-len "$OUTPUT_LEN" \
                --repeats "$REPEATS" ;;
        throughput)
            for w in w-gpu-8b-awq w-gpu-8b; do
                step "throughput-$w" infercore bench throughput --workload "$w" "${REQ[@]}" --no-progress
            done ;;
        tests)
            step tests python3 -m pytest -q -p no:cacheprovider tests/gpu/test_int4_gpu.py ;;
        *)
            echo "{\"part\": \"$part\", \"error\": \"unknown part\"}" | tee -a "$RES" ;;
    esac
done
if [[ " $PARTS " == *" latency "* ]]; then
    ratio latency-awq decode_ms_per_token latency-w-gpu-8b latency-w-gpu-8b-awq
    [[ " $PARTS " == *" gptq "* ]] && ratio latency-gptq decode_ms_per_token latency-w-gpu-8b latency-w-gpu-8b-gptq
fi
if [[ " $PARTS " == *" throughput "* ]]; then
    ratio throughput-awq output_tok_s throughput-w-gpu-8b throughput-w-gpu-8b-awq
fi
echo "{\"part\": \"done\", \"elapsed_s\": $(( $(date +%s) - START )), \"table\": \"${INFERCORE_INT4_TABLE:-}\"}" | tee -a "$RES"
