"""The k × acceptance-rate tables of speculative decoding from `scripts/gpu_spec_decode.sh`'s JSON lines (one or
more files, e.g. one per device call): each method and k against the plain run, for `bench latency` (ratio = plain
ms per token / spec ms per token, best run, with the mean run's) and `bench throughput` (ratio = spec tok/s /
plain tok/s, against the async-scheduled plain run where there is one). Prints one JSON line and the Markdown tables on stderr.

    python scripts/spec_table.py OUT/spec_decode.jsonl [MORE.jsonl ...]
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any


def _lines(paths: list[str]) -> list[dict[str, Any]]:
    out = []
    for path in paths:
        out += [json.loads(line) for line in Path(path).read_text().splitlines() if line.startswith("{")]
    return out


def _spec(line: dict[str, Any]) -> dict[str, Any] | None:
    spec = line.get("speculative_config")
    return json.loads(spec) if isinstance(spec, str) else spec


def tables(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """Ratios keyed by kind, then ``"method k=K"``, then rate; the plain figures they divide."""
    plain_latency = next((line for line in lines if line.get("benchmark") == "latency" and not _spec(line)), None)
    plain_runs = [line for line in lines
                  if line.get("benchmark") != "latency" and "output_tok_s" in line and not _spec(line)]
    # The async-scheduled plain run where there is one (the `--sync-scheduling` one is a reference only).
    plain_tput = next((line for line in plain_runs if line.get("async_scheduling")), plain_runs[0] if plain_runs else None)
    out: dict[str, Any] = {"part": "table", "latency": defaultdict(dict), "throughput": defaultdict(dict),
                           "plain_ms_per_token": plain_latency and plain_latency["decode_ms_per_token"],
                           "plain_tok_s": plain_tput and plain_tput["output_tok_s"]}
    for line in lines:
        spec = _spec(line)
        if not spec:
            continue
        row = f"{spec.get('method')} k={spec.get('num_speculative_tokens')}"
        rate = str(line.get("benchmark_acceptance_rate"))
        cell: dict[str, Any] = {"accepted_length": line.get("spec_mean_accepted_length")}
        if line.get("benchmark") == "latency":
            cell.update(ms=line["decode_ms_per_token"], mean_ms=line.get("decode_ms_per_token_mean"))
            if plain_latency:
                base = plain_latency["decode_ms_per_token"]
                cell.update(ratio=round(base / line["decode_ms_per_token"], 3))
                if line.get("decode_ms_per_token_mean"):
                    cell.update(mean_ratio=round(base / line["decode_ms_per_token_mean"], 3))
            out["latency"][row][rate] = cell
        elif "output_tok_s" in line:
            cell.update(tok_s=line["output_tok_s"])
            if plain_tput:
                cell.update(ratio=round(line["output_tok_s"] / plain_tput["output_tok_s"], 3))
            out["throughput"][row][rate] = cell
    out["latency"], out["throughput"] = dict(out["latency"]), dict(out["throughput"])
    return out


def markdown(table: dict[str, Any]) -> str:
    """The two tables as Markdown: a row per method and k, a column per rate (ratio, then accepted length)."""
    parts = []
    for kind in ("latency", "throughput"):
        rows = table[kind]
        if not rows:
            continue
        rates = sorted({rate for cells in rows.values() for rate in cells}, key=float)
        parts.append(f"{kind} (plain: {table['plain_ms_per_token'] if kind == 'latency' else table['plain_tok_s']})")
        parts.append("| run | " + " | ".join(f"rate {r}" for r in rates) + " |")
        parts.append("|---|" + "---|" * len(rates))
        for row, cells in rows.items():
            shown = []
            for rate in rates:
                cell = cells.get(rate)
                if cell is None:
                    shown.append("")
                    continue
                ratio = cell.get("ratio")
                text = f"{ratio}×" if ratio is not None else str(cell.get("ms", cell.get("tok_s")))
                if cell.get("mean_ratio") is not None:
                    text += f" ({cell['mean_ratio']})"
                if cell.get("accepted_length") is not None:
                    text += f", len {cell['accepted_length']}"
                shown.append(text)
            parts.append(f"| {row} | " + " | ".join(shown) + " |")
        parts.append("")
    return "\n".join(parts)


def main() -> None:
    table = tables(_lines(sys.argv[1:]))
    print(json.dumps(table))
    print(markdown(table), file=sys.stderr)


if __name__ == "__main__":
    main()
