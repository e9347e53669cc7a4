#!/usr/bin/env python3
"""Judge a `scripts/gpu_serving.sh` run against issue 16's acceptance, from its serving.jsonl.

Reads the JSON lines of the labelled `infercore bench serve` runs (c1, c64, c256, sweep) and of
`infercore bench latency`, and prints ONE JSON line with each criterion's figures, ratio and pass flag
(null when a figure is missing, named in ``missing``). The Poisson sweep's table and a summary of the
criteria go to stderr as markdown.

    python3 scripts/serving_verdict.py OUT/serving.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

#: Server output tok/s at concurrency 256 over the same requests offline, at least.
MIN_ONLINE_OVER_OFFLINE = 0.9
#: ITL p99 over TPOT p50 at concurrency 64, at most (tokens arrive without bursts).
MAX_ITL_P99_OVER_TPOT_P50 = 3.0
#: TTFT p50 at concurrency 1 may exceed the offline prefill of the same prompt length by this much.
TTFT_SLACK_MS = 5.0
#: TPOT p50 at concurrency 1 within this fraction of `bench latency`'s decode time per token.
TPOT_TOLERANCE = 0.05


def read_lines(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of ``path``, one per line; other lines (logs, tables) are skipped."""
    records = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def _by_label(records: list[dict[str, Any]], label: str) -> list[dict[str, Any]]:
    return [r for r in records if r.get("label") == label]


def _last(records: list[dict[str, Any]], label: str) -> dict[str, Any] | None:
    found = _by_label(records, label)
    return found[-1] if found else None


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den <= 0:
        return None
    return num / den


def judge_throughput(c256: dict[str, Any] | None) -> dict[str, Any]:
    """Concurrency 256: server output tok/s over offline `LLM.generate` on the same requests."""
    ratio = c256.get("online_over_offline") if c256 else None
    return {"c256_output_tok_s": c256.get("output_throughput_tok_s") if c256 else None,
            "c256_offline_output_tok_s": c256.get("offline_output_throughput_tok_s") if c256 else None,
            "c256_online_over_offline": ratio,
            "c256_pass": None if ratio is None else ratio >= MIN_ONLINE_OVER_OFFLINE}


def judge_bursts(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Concurrency 64: ITL p99 against TPOT p50, in every run (gpu_serving.sh's C64_RUNS repeats it on one
    server). The figures are the worst run's; ``c64_runs`` lists each run's ratio in order."""
    ratios = [_ratio(r.get("itl_p99_ms"), r.get("tpot_p50_ms")) for r in runs]
    known = [(ratio, run) for ratio, run in zip(ratios, runs, strict=True) if ratio is not None]
    if not known:
        return {"c64_itl_p99_ms": None, "c64_tpot_p50_ms": None, "c64_itl_p99_over_tpot_p50": None,
                "c64_runs": ratios, "c64_pass": None}
    ratio, worst = max(known, key=lambda pair: pair[0])
    return {"c64_itl_p99_ms": worst.get("itl_p99_ms"), "c64_tpot_p50_ms": worst.get("tpot_p50_ms"),
            "c64_itl_p99_over_tpot_p50": ratio, "c64_runs": ratios,
            "c64_pass": ratio <= MAX_ITL_P99_OVER_TPOT_P50 and len(known) == len(runs)}


def _offline_prefill(records: list[dict[str, Any]]) -> tuple[float | None, str | None]:
    """The offline batch-1 prefill time (ms) and where it came from: the probes of an --offline-model run,
    else `bench latency`'s TTFT (its best of three one-token runs)."""
    for record in reversed(records):
        if record.get("offline_prefill_p50_ms") is not None:
            return record["offline_prefill_p50_ms"], f"offline_prefill_p50_ms of {record.get('label')}"
    for record in reversed(records):
        if record.get("benchmark") == "latency" and record.get("ttft_ms") is not None:
            return record["ttft_ms"], f"ttft_ms of bench latency (max_num_seqs {record.get('max_num_seqs')})"
    return None, None


def judge_single_stream(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Concurrency 1: TTFT p50 against the offline prefill, TPOT p50 against `bench latency`."""
    c1 = _last(records, "c1")
    latency = next((r for r in reversed(records) if r.get("benchmark") == "latency"), None)
    ttft = c1.get("ttft_p50_ms") if c1 else None
    tpot = c1.get("tpot_p50_ms") if c1 else None
    prefill, source = _offline_prefill(records)
    decode = latency.get("decode_ms_per_token") if latency else None
    over = None if ttft is None or prefill is None else ttft - prefill
    tpot_ratio = _ratio(tpot, decode)
    return {"c1_ttft_p50_ms": ttft, "offline_prefill_ms": prefill, "offline_prefill_source": source,
            "c1_ttft_minus_prefill_ms": over, "c1_ttft_pass": None if over is None else over <= TTFT_SLACK_MS,
            "c1_tpot_p50_ms": tpot, "latency_decode_ms_per_token": decode, "c1_tpot_over_latency": tpot_ratio,
            "c1_tpot_pass": None if tpot_ratio is None else abs(tpot_ratio - 1) <= TPOT_TOLERANCE}


def sweep_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Poisson sweep: one row per request rate."""
    keys = ("request_rate", "completed", "failed", "output_throughput_tok_s", "ttft_p50_ms", "ttft_p99_ms",
            "tpot_p50_ms", "tpot_p99_ms")
    return [{k: r.get(k) for k in keys} for r in _by_label(records, "sweep")]


def verdict(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Every criterion's figures and pass flag, the sweep rows, what was missing and failed requests."""
    result: dict[str, Any] = {"verdict": "serving-acceptance"}
    result |= judge_throughput(_last(records, "c256"))
    result |= judge_bursts(_by_label(records, "c64"))
    result |= judge_single_stream(records)
    result["sweep"] = sweep_rows(records)
    flags = {k: v for k, v in result.items() if k.endswith("_pass")}
    result["missing"] = [k for k, v in flags.items() if v is None] + ([] if result["sweep"] else ["sweep"])
    result["failed_requests"] = sum(r.get("failed", 0) for r in records if "label" in r)
    result["all_pass"] = (not result["missing"] and all(flags.values()) and result["failed_requests"] == 0)
    return result


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def markdown(result: dict[str, Any]) -> str:
    """The criteria and the sweep as markdown tables."""
    lines = ["| criterion | measured | bound | pass |", "|---|---|---|---|",
             f"| c256 online / offline tok/s | {_fmt(result['c256_output_tok_s'], 0)} / "
             f"{_fmt(result['c256_offline_output_tok_s'], 0)} = {_fmt(result['c256_online_over_offline'], 3)} | "
             f">= {MIN_ONLINE_OVER_OFFLINE} | {_fmt(result['c256_pass'])} |",
             f"| c64 ITL p99 / TPOT p50 ms | {_fmt(result['c64_itl_p99_ms'])} / {_fmt(result['c64_tpot_p50_ms'])} = "
             f"{_fmt(result['c64_itl_p99_over_tpot_p50'])} (worst of {len(result['c64_runs'])}: "
             f"{', '.join(_fmt(r) for r in result['c64_runs'])}) | <= {MAX_ITL_P99_OVER_TPOT_P50} | "
             f"{_fmt(result['c64_pass'])} |",
             f"| c1 TTFT p50 - offline prefill ms | {_fmt(result['c1_ttft_p50_ms'])} - "
             f"{_fmt(result['offline_prefill_ms'])} = {_fmt(result['c1_ttft_minus_prefill_ms'])} | "
             f"<= {TTFT_SLACK_MS} | {_fmt(result['c1_ttft_pass'])} |",
             f"| c1 TPOT p50 / bench latency ms | {_fmt(result['c1_tpot_p50_ms'], 3)} / "
             f"{_fmt(result['latency_decode_ms_per_token'], 3)} = {_fmt(result['c1_tpot_over_latency'], 3)} | "
             f"1 ± {TPOT_TOLERANCE} | {_fmt(result['c1_tpot_pass'])} |",
             "", "| req/s | completed | output tok/s | TTFT p50 / p99 ms | TPOT p50 / p99 ms |",
             "|---|---|---|---|---|"]
    for row in result["sweep"]:
        lines.append(f"| {row['request_rate']} | {row['completed']} | {_fmt(row['output_throughput_tok_s'], 0)} | "
                     f"{_fmt(row['ttft_p50_ms'], 1)} / {_fmt(row['ttft_p99_ms'], 1)} | "
                     f"{_fmt(row['tpot_p50_ms'])} / {_fmt(row['tpot_p99_ms'])} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print the verdict's JSON line (stdout) and its tables (stderr); 0 when every criterion passed."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("jsonl", type=Path, help="serving.jsonl written by scripts/gpu_serving.sh")
    args = parser.parse_args(argv)
    if not args.jsonl.is_file():
        print(f"serving_verdict: {args.jsonl} does not exist; pass the serving.jsonl of a gpu_serving.sh run",
              file=sys.stderr)
        return 2
    result = verdict(read_lines(args.jsonl))
    print(json.dumps(result), flush=True)
    print(markdown(result), file=sys.stderr)
    return 0 if result["all_pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
