#!/usr/bin/env bash
# FP8 block-scaled (W8A8, 128x128 weight blocks) against bf16 on one H200, dummy weights, in one call of
# about 4 minutes. JSON lines on stdout and in $OUT/fp8.jsonl; the swept launch table in
# $OUT/fp8_block_table.json; each step's stderr in $OUT/fp8.log.
#   tests       tests/gpu/test_fp8_fused_quant_gpu.py (norm/SiLU + quantization kernels vs the references at
#               8B widths) and tests/gpu/test_fp8_gpu.py's kernel tests (block GEMM, _scaled_mm, quantizer)
#   sweep       benchmarks/fp8_gemm.py --sweep: every candidate launch setting of the block GEMM per Qwen3-8B
#               projection and M bucket (M = 1..512), the chosen table written to $OUT/fp8_block_table.json,
#               then one line per projection and M: cuBLAS bf16 µs vs the block GEMM on a pre-quantized
#               activation (the engine's qkv/gate_up/down), the op quantizing its own input (o_proj) and the
#               per-channel _scaled_mm path. Later steps run with INFERCORE_FP8_BLOCK_TABLE set to the table.
#   latency     `infercore bench latency` at the 8B shape, bf16 (w-gpu-8b) then FP8 block (w-gpu-8b-fp8)
#   throughput  `infercore bench throughput --workload w-gpu-8b,w-gpu-8b-fp8` (one call, FP8 reported as a
#               fraction of bf16), NUM_REQUESTS requests, with the defaults (on Hopper block-scaled linears of 256
#               rows and more through cuBLASLt)
#   summary     one line: FP8/bf16 latency speedup (target >= 1.6) and throughput ratio (target >= 1.15)
#   formats     (only when named in PARTS) the compressed-tensors layouts against block, end to end: `bench latency`
#               on w-gpu-8b-fp8, w-gpu-8b-fp8-channel and w-gpu-8b-fp8-tensor, one `bench throughput` of the four
#               8B workloads, and a line {"part": "formats-summary", ...: each layout's ratio to block}
#   latency_launch_reduce  (only when named in PARTS) FP8 latency with INFERCORE_FP8_SPLIT_REDUCE=launch: split-K
#               partials summed by a second launch instead of by each tile's last split (its line's
#               "workload" is w-gpu-8b-fp8 too: it follows the latency lines)
#   throughput_cublas  (only when named in PARTS, after throughput) FP8 throughput with
#               INFERCORE_FP8_BLOCK_CUBLAS_MIN_M=$CUBLAS_MIN_M (unset: the sweep's measured switch-over, the
#               fp8_cublas_switch line; skipped where cuBLASLt never won; 64 without a sweep): block-scaled linears of that many rows and more
#               through cuBLASLt's block scaling; its line {"part": "throughput_cublas", ...} carries the ratio to
#               the bf16 line of the throughput part
#   moe         (only when named in PARTS; PARTS=moe runs it alone) FP8 mixture of experts at Qwen3-30B-A3B's
#               shape: tests/gpu/test_fused_moe_fp8_gpu.py (Triton fused_moe_fp8_block vs the reference, E=128,
#               top-8, H=2048, I=768, M = 1/64/512; TP share; graph replay), then benchmarks/fp8_moe.py --sweep
#               (launch settings per token bucket for MOE_SWEEP_BUDGET_S s, the table written to
#               $OUT/fp8_moe_table.json, then bf16 fused_moe vs FP8 µs per token count), then `infercore bench
#               throughput --workload w-gpu-moe,w-gpu-moe-fp8` with that table (MOE_NUM_REQUESTS requests), and
#               a line {"part": "moe-summary", bf16 and FP8 tok/s, "ratio", "no_slower": ratio >= 1}
# Every step runs under `timeout` with at most what is left of TOTAL_S (caps: tests 40 s, sweep SWEEP_BUDGET_S + 60, each
# latency 50, throughput 300); a failed or skipped step prints {"part": ..., "exit"|"skipped": ...} and the
# next one runs. Throughput gets what is left: with TOTAL_S=240 that may cut it short; TOTAL_S=540 (one
# 10-minute call) leaves it room for NUM_REQUESTS=256, W-GPU-8B's own count.
#   GPU: bash scripts/gpu_fp8.sh
#   Knobs (environment): PARTS, TOTAL_S (240), SWEEP_BUDGET_S (50: seconds of compiling and timing in the
#   sweep; buckets not reached keep their settings), NUM_REQUESTS (128; W-GPU-8B has 256), OUTPUT_LEN (128), REPEATS (2),
#   TABLE (a launch table to use instead of sweeping: the sweep step is skipped); for moe: MOE_SWEEP_BUDGET_S (40),
#   MOE_NUM_REQUESTS (256, w-gpu-moe's own count).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/infercore-fp8}
mkdir -p "$OUT"
RES="$OUT/fp8.jsonl"
LOG="$OUT/fp8.log"
PARTS=${PARTS:-"tests sweep latency throughput summary"}
PARTS=${PARTS//,/ }
TOTAL_S=${TOTAL_S:-240}
SWEEP_BUDGET_S=${SWEEP_BUDGET_S:-50}
NUM_REQUESTS=${NUM_REQUESTS:-128}
OUTPUT_LEN=${OUTPUT_LEN:-128}
REPEATS=${REPEATS:-2}
if [[ -n "${TABLE:-}" ]]; then
    PARTS=${PARTS//sweep/}
else
    TABLE="$OUT/fp8_block_table.json"
    rm -f "$TABLE"
fi
MOE_SWEEP_BUDGET_S=${MOE_SWEEP_BUDGET_S:-40}
MOE_NUM_REQUESTS=${MOE_NUM_REQUESTS:-256}
MOE_TABLE="$OUT/fp8_moe_table.json"
source scripts/step_lib.sh  # RES and LOG started empty; START, left, step, device_line
table_env() {  # the launch table, once a sweep (or TABLE) gave one
    if [[ -s "$TABLE" ]]; then
        echo "INFERCORE_FP8_BLOCK_TABLE=$TABLE"
    else
        echo "INFERCORE_FP8_BLOCK_TABLE="
    fi
}
device_line
for part in $PARTS; do
    case $part in
        tests)
            step tests 40 python3 -c 'import json, subprocess, sys
r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
                    "tests/gpu/test_fp8_fused_quant_gpu.py", "tests/gpu/test_fp8_gpu.py", "-k", "not checkpoint"],
                   capture_output=True, text=True)
tail = (r.stdout + r.stderr).strip().splitlines()
sys.stderr.write(r.stdout + r.stderr)
print(json.dumps({"part": "tests", "exit": r.returncode, "result": tail[-1] if tail else ""}))
sys.exit(r.returncode)' ;;
        sweep)
            step sweep $((SWEEP_BUDGET_S + 60)) python3 benchmarks/fp8_gemm.py --sweep --write-table "$TABLE" \
                --budget-s "$SWEEP_BUDGET_S" ;;
        latency)
            for w in w-gpu-8b w-gpu-8b-fp8; do
                step "latency-$w" 50 env "$(table_env)" infercore bench latency --workload "$w" \
                    --output-len "$OUTPUT_LEN" --repeats "$REPEATS"
            done ;;
        latency_launch_reduce)  # not in the default PARTS: FP8 with split-K summed by a launch of its own
            step "$part" 50 env "$(table_env)" INFERCORE_FP8_SPLIT_REDUCE=launch infercore bench latency \
                --workload w-gpu-8b-fp8 --output-len "$OUTPUT_LEN" --repeats "$REPEATS" ;;
        throughput_cublas)  # not in the default PARTS: the block-scaled linears from CUBLAS_MIN_M rows on cuBLASLt
            # Unset: the sweep's measured switch-over (benchmarks/fp8_gemm.py's fp8_cublas_switch line), else 64.
            min_m=${CUBLAS_MIN_M:-$(python3 -c 'import json, sys
found = [json.loads(l) for l in open(sys.argv[1]) if "fp8_cublas_switch" in l]
print(found[-1]["cublas_min_m"] if found else 64)' "$RES")}
            if [[ "$min_m" == None ]]; then
                echo '{"part": "throughput_cublas", "skipped": "cuBLASLt never beat the Triton kernel (or its probe refused)"}' \
                    | tee -a "$RES"
                continue
            fi
            step "$part" 300 env "$(table_env)" INFERCORE_FP8_BLOCK_CUBLAS_MIN_M="$min_m" infercore bench \
                throughput --workload w-gpu-8b-fp8 --num-requests "$NUM_REQUESTS" --no-progress
            python3 - "$RES" "$min_m" <<'EOF' | tee -a "$RES"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
runs = [l for l in lines if l.get("workload") in ("w-gpu-8b", "w-gpu-8b-fp8") and "output_tok_s" in l]
bf16 = next((l["output_tok_s"] for l in runs if l["workload"] == "w-gpu-8b"), None)
last = runs[-1] if runs and runs[-1]["workload"] == "w-gpu-8b-fp8" else None
out = {"part": "throughput_cublas", "min_m": int(sys.argv[2]), "output_tok_s": last and last["output_tok_s"]}
if bf16 and last:
    out["ratio_to_bf16"] = round(last["output_tok_s"] / bf16, 3)
print(json.dumps(out))
EOF
            ;;
        throughput)
            step throughput 300 env "$(table_env)" infercore bench throughput --workload w-gpu-8b,w-gpu-8b-fp8 \
                --num-requests "$NUM_REQUESTS" --no-progress ;;
        formats)  # not in the default PARTS: FP8 per channel and per tensor against block, end to end
            for w in w-gpu-8b-fp8 w-gpu-8b-fp8-channel w-gpu-8b-fp8-tensor; do
                step "formats-latency-$w" 50 env "$(table_env)" infercore bench latency --workload "$w" \
                    --output-len "$OUTPUT_LEN" --repeats "$REPEATS"
            done
            step formats-throughput 400 env "$(table_env)" infercore bench throughput \
                --workload w-gpu-8b,w-gpu-8b-fp8,w-gpu-8b-fp8-channel,w-gpu-8b-fp8-tensor \
                --num-requests "$NUM_REQUESTS" --no-progress
            python3 - "$RES" <<'EOF' | tee -a "$RES"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
# The last line per workload: this part's runs come after the latency and throughput parts' (if any ran).
lat = {l["workload"]: l["decode_ms_per_token"] for l in lines if "decode_ms_per_token" in l and "workload" in l}
tput = {l["workload"]: l["output_tok_s"] for l in lines if "output_tok_s" in l and "workload" in l}
out = {"part": "formats-summary", "latency_ms_per_token": lat, "throughput_tok_s": tput}
for name in ("channel", "tensor"):
    w = f"w-gpu-8b-fp8-{name}"
    if lat.get(w) and lat.get("w-gpu-8b-fp8"):  # > 1: the layout is slower than block
        out[f"{name}_latency_over_block"] = round(lat[w] / lat["w-gpu-8b-fp8"], 3)
    if tput.get(w) and tput.get("w-gpu-8b-fp8"):  # >= 1: no slower than block
        out[f"{name}_throughput_over_block"] = round(tput[w] / tput["w-gpu-8b-fp8"], 3)
print(json.dumps(out))
EOF
            ;;
        summary)
            python3 - "$RES" <<'EOF' | tee -a "$RES"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
lat = {}
for l in lines:  # the first line per workload: latency_launch_reduce's comes after
    if l.get("benchmark") == "latency":
        lat.setdefault(l["workload"], l["decode_ms_per_token"])
tput = {}
for l in lines:  # the first line per workload: throughput_cublas's comes after
    if "output_tok_s" in l and "workload" in l:
        tput.setdefault(l["workload"], l["output_tok_s"])
gemm = [l for l in lines if l.get("bench") == "fp8_block_gemm"]
out = {"part": "summary", "latency_ms_per_token": lat, "throughput_tok_s": tput}
if "w-gpu-8b" in lat and "w-gpu-8b-fp8" in lat:
    out["latency_speedup"] = round(lat["w-gpu-8b"] / lat["w-gpu-8b-fp8"], 3)
    out["latency_target_1_6"] = out["latency_speedup"] >= 1.6
if tput.get("w-gpu-8b") and tput.get("w-gpu-8b-fp8"):
    out["throughput_ratio"] = round(tput["w-gpu-8b-fp8"] / tput["w-gpu-8b"], 3)
    out["throughput_target_1_15"] = out["throughput_ratio"] >= 1.15
if gemm:
    out["gemm_speedup_fused_by_m"] = {m: round(sum(l["bf16_us"] for l in gemm if l["m"] == m)
                                               / sum(l["fp8_gemm_us"] for l in gemm if l["m"] == m), 3)
                                      for m in sorted({l["m"] for l in gemm})}
    # GEMMs alone (the norm or SiLU in front quantizes): block vs the faster per-channel path; > 1: channel
    # is faster. The switch line says which per-channel path the table picks at each size.
    out["channel_speed_vs_block_by_m"] = {
        m: round(sum(l["fp8_gemm_us"] for l in gemm if l["m"] == m)
                 / sum(min(l["channel_scaled_mm_us"], l["channel_triton_us"]) for l in gemm if l["m"] == m), 3)
        for m in sorted({l["m"] for l in gemm})}
    # The block GEMM through cuBLASLt (where the probe passed) against the Triton kernel, per M; > 1: cuBLASLt is
    # faster, so INFERCORE_FP8_BLOCK_CUBLAS_MIN_M belongs at the smallest M from which it stays above 1.
    cublas = [l for l in gemm if l.get("fp8_cublas_us")]
    if cublas:
        out["cublas_speed_vs_triton_by_m"] = {
            m: round(sum(l["fp8_gemm_us"] for l in cublas if l["m"] == m)
                     / sum(l["fp8_cublas_us"] for l in cublas if l["m"] == m), 3)
            for m in sorted({l["m"] for l in cublas})}
    switch = [l for l in lines if l.get("bench") == "fp8_channel_switch"]
    if switch:
        out["channel_triton_max_m"] = switch[-1]["channel_triton_max_m"]
print(json.dumps(out))
EOF
            ;;
        moe)
            rm -f "$MOE_TABLE"
            step moe-tests 60 python3 -c 'import json, subprocess, sys
r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/gpu/test_fused_moe_fp8_gpu.py"],
                   capture_output=True, text=True)
tail = (r.stdout + r.stderr).strip().splitlines()
sys.stderr.write(r.stdout + r.stderr)
print(json.dumps({"part": "moe-tests", "exit": r.returncode, "result": tail[-1] if tail else ""}))
sys.exit(r.returncode)'
            step moe-kernels $((MOE_SWEEP_BUDGET_S + 60)) python3 benchmarks/fp8_moe.py --sweep --write-table "$MOE_TABLE" \
                --budget-s "$MOE_SWEEP_BUDGET_S"
            moe_env="INFERCORE_FP8_MOE_TABLE="
            [[ -s "$MOE_TABLE" ]] && moe_env="INFERCORE_FP8_MOE_TABLE=$MOE_TABLE"
            step moe-throughput 400 env "$(table_env)" "$moe_env" infercore bench throughput \
                --workload w-gpu-moe,w-gpu-moe-fp8 --num-requests "$MOE_NUM_REQUESTS" --no-progress
            python3 - "$RES" <<'EOF' | tee -a "$RES"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
tput = {l["workload"]: l.get("output_tok_s") for l in lines if "output_tok_s" in l and "workload" in l}
kernels = {l["tokens"]: l["fp8_speedup"] for l in lines if l.get("bench") == "fp8_moe"}
out = {"part": "moe-summary", "bf16_tok_s": tput.get("w-gpu-moe"), "fp8_tok_s": tput.get("w-gpu-moe-fp8"),
       "kernel_fp8_speedup_by_tokens": kernels}
if out["bf16_tok_s"] and out["fp8_tok_s"]:
    out["ratio"] = round(out["fp8_tok_s"] / out["bf16_tok_s"], 3)
    out["no_slower"] = out["ratio"] >= 1.0
print(json.dumps(out))
EOF
            ;;
        *)
            echo "{\"part\": \"$part\", \"skipped\": \"unknown part\"}" | tee -a "$RES" ;;
    esac
done
echo "== done after $(( $(date +%s) - START )) s; results in $RES" >&2
