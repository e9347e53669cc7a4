#!/usr/bin/env bash
# Issue 16 item 5: one serving configuration measured by an independent client (aiperf, counting tokens
# from the server's usage) and by `infercore bench serve`, against the same server in one call. The W-GPU
# shape is served with a tokenizer written here (scripts/make_bench_tokenizer.py: aiperf needs one and can't
# download it); aiperf comes from the .whl-aiperf/ wheelhouse (scripts/build_device_wheelhouse.sh aiperf),
# installed into a folder of its own. Two JSON lines (client "aiperf" and "infercore") go to stdout and
# $WORK/crosscheck.jsonl; where OUT is set, it and an archive of WORK (aiperf's files, logs) are copied there.
#   GPU: bash scripts/device_run.sh bash scripts/aiperf_crosscheck.sh      (carry .whl and .whl-aiperf)
#   CPU dry run: CPU_DRY_RUN=1 bash scripts/aiperf_crosscheck.sh  (aiperf from AIPERF_SITE, or on PATH)
# Knobs: WORKLOAD, DTYPE, INPUT_LEN, OUTPUT_LEN, MAX_MODEL_LEN, CONCURRENCY, NUM (requests), SERVE_EXTRA,
# AIPERF_SITE (where aiperf is installed), AIPERF_WHEELS (its wheelhouse; empty: install nothing), BUDGET_S.
set -uo pipefail
cd "$(dirname "$0")/.."
WORK=${WORK:-/tmp/infercore-aiperf}
DELIVER=(crosscheck.jsonl)
mkdir -p "$WORK"
RES="$WORK/crosscheck.jsonl"
: >"$RES"
if [[ "${CPU_DRY_RUN:-0}" == 1 ]]; then
    : "${WORKLOAD:=w-cpu}" "${DTYPE:=float32}" "${INPUT_LEN:=64}" "${OUTPUT_LEN:=8}" "${MAX_MODEL_LEN:=256}"
    : "${CONCURRENCY:=4}" "${NUM:=16}" "${AIPERF_WHEELS=}"  # aiperf from AIPERF_SITE: the wheels are py3.12
    : "${SERVE_EXTRA:=--num-gpu-blocks-override 256 --cpu-threads 1 --max-num-seqs 16}"
fi
BUDGET_S=${BUDGET_S:-500}
# shellcheck source=scripts/serving_lib.sh
source scripts/serving_lib.sh
WORKLOAD=${WORKLOAD:-w-gpu}
DTYPE=${DTYPE:-bfloat16}
INPUT_LEN=${INPUT_LEN:-512}
OUTPUT_LEN=${OUTPUT_LEN:-256}
MAX_MODEL_LEN=${MAX_MODEL_LEN:-1024}
CONCURRENCY=${CONCURRENCY:-64}
NUM=${NUM:-256}
PORT=${PORT:-8124}
URL="http://127.0.0.1:$PORT"
MODEL="$WORK/$WORKLOAD-model"
TOKENIZER="$WORK/$WORKLOAD-tokenizer"
AIPERF_SITE=${AIPERF_SITE:-/tmp/aiperf-site}

# aiperf and what the image lacks of its needs, apart from our own packages (--no-deps: the image's
# versions of what it already has stay in use).
AIPERF_WHEELS=${AIPERF_WHEELS-.whl-aiperf}
if [[ -n "$AIPERF_WHEELS" && -d "$AIPERF_WHEELS" ]]; then
    step aiperf-install 120 python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$AIPERF_SITE" "$AIPERF_WHEELS"/*.whl || exit 1
fi
# Only its own folder and the image's packages. A local tokenizer folder keeps it off the hub; don't set
# HF_HUB_OFFLINE: aiperf 0.13 then takes the folder for a repo id and fails.
AIPERF=(env PYTHONPATH="$AIPERF_SITE" python3 -m aiperf)
if ! "${AIPERF[@]}" --version >/dev/null 2>&1; then
    echo "aiperf does not start from $AIPERF_SITE; build .whl-aiperf with scripts/build_device_wheelhouse.sh aiperf" \
         "or install it there: python3 -m pip install --target $AIPERF_SITE aiperf" >&2
    "${AIPERF[@]}" --version 2>&1 | tail -5 >&2
    exit 1
fi

VOCAB_SIZE=$(python3 -c "import sys; from pathlib import Path; from infercore.benchmarks.workloads import WORKLOADS; \
w = WORKLOADS[sys.argv[1]]; w.write_model_folder(Path(sys.argv[2])); print(w.model_config['vocab_size'])" \
    "$WORKLOAD" "$MODEL") || exit 1
step tokenizer 120 python3 scripts/make_bench_tokenizer.py "$TOKENIZER" --vocab-size "$VOCAB_SIZE" >&2 || exit 1

# shellcheck disable=SC2206  # SERVE_EXTRA is a list of flags
SERVE_FLAGS=(--tokenizer "$TOKENIZER" --load-format dummy --dtype "$DTYPE" --max-model-len "$MAX_MODEL_LEN"
             --port "$PORT" --served-model-name "$WORKLOAD" --disable-log-requests ${SERVE_EXTRA:-})
start_server "$URL" "$WORK/serve.log" "$MODEL" "${SERVE_FLAGS[@]}" || exit 1

BENCH=(infercore bench serve --base-url "$URL" --input-len "$INPUT_LEN" --output-len "$OUTPUT_LEN" --no-progress)
step warmup 90 "${BENCH[@]}" --num-prompts "$CONCURRENCY" --max-concurrency "$CONCURRENCY" >/dev/null \
    2>"$WORK/warmup.err"
rm -rf "$WORK/aiperf"
step aiperf 240 "${AIPERF[@]}" profile --model "$WORKLOAD" --url "$URL" --endpoint-type completions --streaming \
    --tokenizer "$TOKENIZER" --use-server-token-count --concurrency "$CONCURRENCY" --request-count "$NUM" \
    --synthetic-input-tokens-mean "$INPUT_LEN" --synthetic-input-tokens-stddev 0 \
    --output-tokens-mean "$OUTPUT_LEN" --output-tokens-stddev 0 --extra-inputs ignore_eos:true \
    --random-seed 0 --ui-type none --no-server-metrics --no-gpu-telemetry --output-artifact-dir "$WORK/aiperf" \
    >"$WORK/aiperf.log" 2>&1
# The summary aiperf exported, as one JSON line of the figures bench serve reports too.
python3 - "$WORK/aiperf" <<'EOF' | tee -a "$RES"
import json
import sys
from pathlib import Path

found = sorted(Path(sys.argv[1]).rglob("profile_export_aiperf.json"))
if not found:
    print(json.dumps({"client": "aiperf", "error": f"no profile_export_aiperf.json under {sys.argv[1]}"}))
    sys.exit(0)
data = json.loads(found[-1].read_text())
records = data.get("records", data)


def stat(name, key):
    value = records.get(name)
    return value.get(key) if isinstance(value, dict) else None


line = {"client": "aiperf", "aiperf_version": data.get("aiperf_version"), "export": str(found[-1]),
        "errors": data.get("error_summary") or []}
for name, label in [("request_count", "completed"), ("request_error_rate", "error_rate_pct"),
                    ("output_token_throughput", "output_throughput_tok_s"), ("request_throughput", "request_throughput")]:
    line[label] = stat(name, "avg")
for name, label in [("time_to_first_token", "ttft"), ("inter_token_latency", "tpot"),
                    ("inter_chunk_latency", "itl"), ("request_latency", "e2el")]:
    for q in ("p50", "p99"):
        line[f"{label}_{q}_ms"] = stat(name, q)
line["output_tokens_mean"] = stat("output_sequence_length", "avg")
line["input_tokens_mean"] = stat("input_sequence_length", "avg")
print(json.dumps(line))
EOF
step bench-serve 240 "${BENCH[@]}" --num-prompts "$NUM" --max-concurrency "$CONCURRENCY" \
    --num-workers "$(workers "$CONCURRENCY" 2)" --vocab-size 10000 --label crosscheck 2>"$WORK/bench.err" \
    | python3 -c "import json, sys; [print(json.dumps({'client': 'infercore', **json.loads(l)})) for l in sys.stdin]" \
    | tee -a "$RES"
# The same again with text prompts (random words, tokenized by the server as aiperf's are).
step bench-serve-text 240 "${BENCH[@]}" --num-prompts "$NUM" --max-concurrency "$CONCURRENCY" \
    --num-workers "$(workers "$CONCURRENCY" 2)" --prompt-type text --tokenizer "$TOKENIZER" --label crosscheck-text 2>"$WORK/bench-text.err" \
    | python3 -c "import json, sys; [print(json.dumps({'client': 'infercore-text', **json.loads(l)})) for l in sys.stdin]" \
    | tee -a "$RES"
stop_server
# How far the two clients agree: aiperf's figure over ours (token-id and text prompts), per metric.
python3 - "$RES" <<'EOF' | tee -a "$RES"
import json
import sys

lines = {r.get("client"): r for r in map(json.loads, open(sys.argv[1])) if isinstance(r, dict)}
theirs = lines.get("aiperf", {})
for client in ("infercore", "infercore-text"):
    ours = lines.get(client, {})
    ratios = {}
    for key in ("output_throughput_tok_s", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "itl_p50_ms", "itl_p99_ms"):
        a, b = theirs.get(key), ours.get(key)
        ratios[f"{key}_aiperf_over_{client}"] = a / b if isinstance(a, (int, float)) and b else None
    print(json.dumps({"client": f"crosscheck-{client}", **ratios}))
EOF
echo "== done after ${SECONDS}s; results in $RES (aiperf's own files under $WORK/aiperf)" >&2
