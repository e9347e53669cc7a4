# Sourced by the GPU scripts that run their parts under one time budget (gpu_fp8.sh, gpu_fp8kv.sh, gpu_lines.sh).
# Needs TOTAL_S, RES (the JSON lines file) and LOG (stderr of every step), which it starts empty; sets START. With
# STEP_TAG=1 each JSON line a step prints gets its step's name as "part".
: > "$RES"
: > "$LOG"
START=$(date +%s)
device_line() {  # device_line: the GPU's name and memory, and the parts to run ($PARTS), as the first JSON line
    local gpu; gpu=$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -1)
    python3 -c "import json, sys; print(json.dumps({'part': 'device', 'gpu': sys.argv[1], 'parts': sys.argv[2]}))" \
        "$gpu" "$PARTS" | tee -a "$RES"
}
left() { echo $((TOTAL_S - ($(date +%s) - START))); }
step() {  # step NAME CAP CMD...: CMD for at most min(CAP, what is left of TOTAL_S), its JSON lines to $RES
    local name=$1 cap=$2; shift 2
    local budget; budget=$(left)
    (( budget > cap )) && budget=$cap
    if (( budget < 15 )); then
        echo "{\"part\": \"$name\", \"skipped\": \"TOTAL_S=$TOTAL_S spent\"}" | tee -a "$RES"
        return
    fi
    echo "== $name ($budget s): $*" | tee -a "$LOG" >&2
    local t0; t0=$(date +%s)
    if [[ "${STEP_TAG:-0}" == 1 ]]; then
        timeout -k 10 "$budget" "$@" 2>>"$LOG" | grep --line-buffered '^{"' \
            | sed -u "s/^{/{\"part\": \"$name\", /" | tee -a "$RES"
    else
        timeout -k 10 "$budget" "$@" 2>>"$LOG" | grep --line-buffered '^{' | tee -a "$RES"
    fi
    local rc=${PIPESTATUS[0]}
    echo "== $name exit $rc after $(( $(date +%s) - t0 )) s" | tee -a "$LOG" >&2
    (( rc == 0 )) || echo "{\"part\": \"$name\", \"exit\": $rc, \"seconds\": $(( $(date +%s) - t0 )), \"log\": \"$LOG\"}" | tee -a "$RES"
}
