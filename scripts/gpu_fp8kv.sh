#!/usr/bin/env bash
# fp8 KV decode attention on one H200 (or H100), in one call of about 4 minutes: the fp8 decode tested at long
# contexts, launch settings swept against the built-in fp8 setting, the fastest written as a launch table, and W-GPU over
# an fp8 cache run with the table and then with the built-in setting (the table's run first: if time runs short,
# the built-in figure is the one issue 41 already has). JSON lines on stdout and in
# $OUT/fp8kv.jsonl (each tagged with its "part"); the table in $OUT/decode_fp8_table.json; each step's
# stderr in $OUT/fp8kv.log.
#   tests            tests/gpu/test_kv_fp8_gpu.py -k fp8_decode: the fp8 decode (K as bytes or as words) against
#                    the reference that quantizes K/V the same way, contexts to 8k, 1 and several splits
#   sweep            benchmarks/decode_fp8_sweep.py: the built-in setting (128:4:3) and SETTINGS on batch
#                    256 x 1,024 and on a W-GPU-like ragged batch (contexts 100-2,048, 4,096-token table), µs,
#                    TB/s and fraction of 4.3 TB/s each (SETTINGS most promising first: settings not reached
#                    after 45 s are skipped); then programs per SM for the fastest; the choice
#                    written to $OUT/decode_fp8_table.json (INFERCORE_DECODE_FP8_TABLE for the later steps)
#   throughput_table `python -m infercore bench throughput --workload w-gpu-fp8kv` with
#                    INFERCORE_DECODE_FP8_TABLE set to the sweep's table
#   throughput_base  the same with the built-in setting (INFERCORE_DECODE_FP8_TABLE empty)
#   summary          one line: the microbenchmark's fractions of 4.3 TB/s (target 0.85) and the tok/s of both
#                    throughput runs (target 36,000), the table's against the built-in's
# Every step runs under `timeout` with at most what is left of TOTAL_S (caps: tests 35 s, sweep 65, each
# throughput run 70); a failed or skipped step prints {"part": ..., "exit"|"skipped": ...} and the next runs.
#   GPU: bash scripts/gpu_fp8kv.sh
#   Knobs (environment): PARTS, TOTAL_S (230; the install before it takes its own time), SETTINGS (see below),
#   PROGRAMS_PER_SM (2,4,8), NUM_REQUESTS (W-GPU's 256), TABLE (a table to use instead of sweeping: the sweep
#   step is skipped).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/infercore-fp8kv}
mkdir -p "$OUT"
RES="$OUT/fp8kv.jsonl"
LOG="$OUT/fp8kv.log"
PARTS=${PARTS:-"tests sweep throughput_table throughput_base summary"}
PARTS=${PARTS//,/ }
TOTAL_S=${TOTAL_S:-230}
SETTINGS=${SETTINGS:-"128:4:2 64:4:3 128:8:3 256:4:3 128:4:1:k 64:4:2 256:8:3 128:8:2"}
PROGRAMS_PER_SM=${PROGRAMS_PER_SM:-2,4,8}
NUM_REQUESTS=${NUM_REQUESTS:-256}
if [[ -n "${TABLE:-}" ]]; then
    PARTS=${PARTS//sweep/}
else
    TABLE="$OUT/decode_fp8_table.json"
    rm -f "$TABLE"
fi
STEP_TAG=1  # step names tag their JSON lines
source scripts/step_lib.sh  # RES and LOG started empty; START, left, step, device_line
device_line
for part in $PARTS; do
    case $part in
        tests)
            step tests 35 python3 -c 'import json, subprocess, sys, time
t0 = time.time()
r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/gpu/test_kv_fp8_gpu.py",
                    "-k", "fp8_decode"], capture_output=True, text=True)
tail = (r.stdout + r.stderr).strip().splitlines()
sys.stderr.write(r.stdout + r.stderr)
print(json.dumps({"exit": r.returncode, "result": tail[-1] if tail else "", "seconds": round(time.time() - t0, 1)}))
sys.exit(r.returncode)' ;;
        sweep)
            # shellcheck disable=SC2086  # SETTINGS is a list
            step sweep 65 python3 benchmarks/decode_fp8_sweep.py --settings $SETTINGS \
                --programs-per-sm "$PROGRAMS_PER_SM" --write-table "$TABLE" --budget-s 45 ;;
        throughput_base)
            step throughput_base 70 env INFERCORE_DECODE_FP8_TABLE= python3 -m infercore bench throughput \
                --workload w-gpu-fp8kv --num-requests "$NUM_REQUESTS" --no-progress ;;
        throughput_table)
            if [[ -s "$TABLE" ]]; then
                step throughput_table 70 env INFERCORE_DECODE_FP8_TABLE="$TABLE" python3 -m infercore bench \
                    throughput --workload w-gpu-fp8kv --num-requests "$NUM_REQUESTS" --no-progress
            else
                echo "{\"part\": \"throughput_table\", \"skipped\": \"no table at $TABLE\"}" | tee -a "$RES"
            fi ;;
        summary)
            python3 - "$RES" "$TABLE" <<'EOF' | tee -a "$RES"
import json, os, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
out = {"part": "summary"}
choice = next((l for l in lines if l.get("benchmark") == "decode_attention_fp8_choice"), None)
if choice:
    out["chosen"] = {"setting": choice["setting"], "programs_per_sm": choice["programs_per_sm"]}
    for side in ("uniform", "ragged"):
        out[f"{side}_fraction_of_4.3TBps"] = {"built_in": choice["baseline"][side]["fraction_of_4.3TBps"],
                                              "chosen": choice[side]["fraction_of_4.3TBps"]}
    out["microbenchmark_target_0_85"] = min(choice["uniform"]["fraction_of_4.3TBps"],
                                            choice["ragged"]["fraction_of_4.3TBps"]) >= 0.85
    out["max_rel_diff_vs_built_in"] = max(choice["rel_diff_uniform"], choice["rel_diff_ragged"])
elif os.path.exists(sys.argv[2]):
    out["table"] = json.load(open(sys.argv[2]))
tput = {l["part"]: l["output_tok_s"] for l in lines if "output_tok_s" in l and l.get("part", "").startswith("throughput")}
out["w_gpu_fp8kv_tok_s"] = tput
if tput.get("throughput_base") and tput.get("throughput_table"):
    out["table_over_built_in"] = round(tput["throughput_table"] / tput["throughput_base"], 3)
if tput:
    out["throughput_target_36k"] = max(tput.values()) >= 36_000
print(json.dumps(out))
EOF
            ;;
        *) echo "{\"part\": \"$part\", \"skipped\": \"unknown part\"}" | tee -a "$RES" ;;
    esac
done
