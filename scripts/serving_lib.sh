# Sourced by the serving scripts (gpu_serving.sh, aiperf_crosscheck.sh): bounded steps and a server that
# is always stopped. Set BUDGET_S (the whole run's seconds), WORK (their folder) and DELIVER (the files of
# WORK worth reading first) before sourcing; call start_server with the `infercore serve` arguments. The
# EXIT trap stops the server, kills whatever is listed in BACKGROUND_PIDS and, when OUT names another
# folder (the GPU machine's folder of results, which takes only a few files), copies DELIVER there with
# the rest of WORK as one archive, less model and tokenizer folders: also after a failed start.

END=$((SECONDS + ${BUDGET_S:-530}))
# Progress lines go to the stderr of the script, also from a step whose stderr goes to a file.
exec 3>&2
SERVER=""
BACKGROUND_PIDS=()

# step NAME LIMIT CMD...: run CMD for at most LIMIT seconds and never past the budget (less a reserve for
# stopping the server and reporting); skipped when the budget is spent. timeout gives CMD a process group
# of its own, so a step's client processes die with it.
step() {
    local name=$1 limit=$2; shift 2
    local left=$((END - SECONDS - 20))
    if ((left < 10)); then echo "== skip $name: the ${BUDGET_S:-530}s budget is spent" >&3; return 124; fi
    ((limit > left)) && limit=$left
    echo "== $name (at most ${limit}s)" >&3
    timeout -k 10 "$limit" "$@"
    local rc=$?
    echo "== $name: exit $rc after ${SECONDS}s" >&3
    return $rc
}

healthy() {
    python3 -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)" "$1/health" 2>/dev/null
}

# start_server URL LOG ARGS...: `infercore serve ARGS` in a session of its own (so its process group holds
# the engine and every API server process), then wait until URL/health answers (at most STARTUP_S seconds).
start_server() {
    local url=$1 log=$2; shift 2
    setsid infercore serve "$@" >"$log" 2>&1 &
    SERVER=$!
    local deadline=$((SECONDS + ${STARTUP_S:-240}))
    ((deadline > END - 60)) && deadline=$((END - 60))
    while ((SECONDS < deadline)); do
        healthy "$url" && { echo "== server ready after ${SECONDS}s" >&2; return 0; }
        kill -0 "$SERVER" 2>/dev/null || break
        sleep 1
    done
    echo "server did not become healthy (log: $log):" >&2
    tail -40 "$log" >&2
    return 1
}

stop_server() {
    [[ -z "$SERVER" ]] && return 0
    kill -INT "$SERVER" 2>/dev/null
    for _ in $(seq 30); do kill -0 "$SERVER" 2>/dev/null || break; sleep 1; done
    # Whatever is left of its process group (the engine, API server processes) is killed outright.
    kill -KILL -- "-$SERVER" 2>/dev/null
    wait "$SERVER" 2>/dev/null
    SERVER=""
}

deliver() {
    [[ -z "${OUT:-}" || "$OUT" -ef "$WORK" ]] && return 0
    mkdir -p "$OUT"
    local file
    for file in "${DELIVER[@]}"; do [[ -f "$WORK/$file" ]] && cp "$WORK/$file" "$OUT/"; done
    tar -czf "$OUT/$(basename "$WORK")-files.tar.gz" -C "$WORK" --exclude='*-model' --exclude='*-tokenizer' \
        --exclude='*.whl' . 2>/dev/null
}

cleanup() {
    local pid
    for pid in "${BACKGROUND_PIDS[@]}"; do kill -KILL -- "-$pid" "$pid" 2>/dev/null; done
    stop_server
    deliver
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The server's processes: every python process of its process group, less multiprocessing's resource tracker.
server_pids() {
    local stat pid rest _state _ppid pgrp
    for stat in /proc/[0-9]*/stat; do
        pid=${stat#/proc/}; pid=${pid%/stat}
        # The fields after the parenthesised command name (which may hold spaces): state, ppid, pgrp.
        rest=$(sed 's/^.*) //' "$stat" 2>/dev/null) || continue
        read -r _state _ppid pgrp _ <<<"$rest"
        [[ -n "$SERVER" && "$pgrp" == "$SERVER" ]] || continue
        grep -qa resource_tracker "/proc/$pid/cmdline" 2>/dev/null && continue
        grep -qa python "/proc/$pid/cmdline" 2>/dev/null && echo "$pid"
    done
}

# workers CONCURRENCY WANTED: client processes for bench serve (never more than the concurrency).
workers() { local c=$1 w=$2; ((w > c)) && w=$c; echo "$w"; }
