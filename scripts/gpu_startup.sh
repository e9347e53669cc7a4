#!/usr/bin/env bash
# Start-up on one GPU (#34), in one call of about 4 minutes; run it FIRST on a fresh machine. JSON lines on stdout
# and in $OUT/startup.jsonl (each serve run: /health and first-completion seconds, the engine's timeline):
#   fresh      `infercore serve` at the 8B shape, once, before anything on the machine built a kernel (default
#              settings: on CUDA the kernels build ahead, as no earlier start-up of the configuration did)
#   imports    what the serve engine process imports, timed alone (benchmarks/startup.py --engine-imports)
#   builds     8B serve over an empty Triton cache, kernels built one by one, then with
#              INFERCORE_KERNEL_BUILDS_AHEAD=1 (side by side); then both again over warm caches, then the
#              default once more (the markers left by the ahead run: it should skip building ahead)
#   test       tests/gpu/test_kernel_builds_ahead_gpu.py (same tokens, no builds while serving)
#   GPU: bash scripts/device_run.sh bash scripts/gpu_startup.sh
# Knobs (environment): PARTS (default "fresh imports builds test"), WORKLOAD (w-gpu-8b).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/infercore-startup}
mkdir -p "$OUT"
RES="$OUT/startup.jsonl"
W=${WORKLOAD:-w-gpu-8b}
PARTS=${PARTS:-fresh imports builds test}
# serve LABEL ARGS...: benchmarks/startup.py's serve runs, each line tagged with LABEL.
serve() {
    local label=$1; shift
    timeout 200 python benchmarks/startup.py --skip-llm --serve-workload "$W" --runs 1 "$@" 2>>"$OUT/startup.log" \
        | python -c '
import json, sys
for line in sys.stdin:
    if line.startswith("{"):
        d = json.loads(line)
        d["label"] = sys.argv[1]
        print(json.dumps(d))' "$label" | tee -a "$RES" | cut -c1-400
}
for part in $PARTS; do
    case "$part" in
        fresh) serve fresh ;;
        imports) timeout 120 python benchmarks/startup.py --engine-imports --skip-llm --skip-serve --runs 0 \
                     2>>"$OUT/startup.log" | tee -a "$RES" | cut -c1-1500 ;;
        builds)
            INFERCORE_KERNEL_BUILDS_AHEAD=0 serve empty-cache-one-by-one --empty-kernel-cache
            INFERCORE_KERNEL_BUILDS_AHEAD=1 serve empty-cache-ahead --empty-kernel-cache
            INFERCORE_KERNEL_BUILDS_AHEAD=0 serve warm-one-by-one
            INFERCORE_KERNEL_BUILDS_AHEAD=1 serve warm-ahead
            serve warm-default ;;  # unset: the ahead run above left its markers, so this one skips building ahead
        test) timeout 300 python -m pytest -q -s tests/gpu/test_kernel_builds_ahead_gpu.py 2>&1 | tail -5 ;;
        *) echo "{\"part\": \"$part\", \"error\": \"unknown part\"}" ;;
    esac
done
