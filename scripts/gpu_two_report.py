"""The JSON lines of scripts/gpu_two.sh: tagging a step's output, a pytest run's outcomes, the summary.

    python3 scripts/gpu_two_report.py tag STEP            stdin's JSON-object lines to stdout with "step": STEP
                                                          first; every other line to stderr (the step's log)
    python3 scripts/gpu_two_report.py junit STEP FILE     one line per test case of a pytest --junitxml file
    python3 scripts/gpu_two_report.py summary FILE        one line of the run's figures and the issue's targets,
                                                          plus a Markdown table of them (field "table_md")
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

#: The issue's targets: TP=2 and DP=2 throughput on the 8B shape over TP=1's, TP=2's decode time over TP=1's.
TARGETS = {"tp2_throughput_over_tp1": (">=", 1.6), "dp2_throughput_over_tp1": (">=", 1.85),
           "tp2_latency_over_tp1": ("<=", 0.65)}


def tag(step: str) -> int:
    for raw in sys.stdin:
        line = raw.rstrip("\n")
        start = line.find("{")  # pytest -s may print progress dots before a test's line
        try:
            value = json.loads(line[start:]) if start >= 0 else None
        except json.JSONDecodeError:
            value = None
        if isinstance(value, dict):
            print(json.dumps({"step": step, **value}), flush=True)
        else:
            print(line, file=sys.stderr, flush=True)
    return 0


def junit(step: str, path: str) -> int:
    """Each test case's outcome (passed, failed, error, skipped) with seconds and, if any, the message."""
    if not Path(path).is_file():
        print(json.dumps({"step": step, "test": None, "outcome": "error", "message": "pytest wrote no report"}))
        return 1
    failed = 0
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome, message = "passed", None
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed"}.get(child.tag, child.tag)
                message = (child.get("message") or child.text or "")[:400]
        failed += outcome in ("failed", "error")
        line = {"step": step, "test": f"{case.get('classname', '')}::{case.get('name', '')}", "outcome": outcome,
                "seconds": round(float(case.get("time", 0) or 0), 2)}
        print(json.dumps(line | ({"message": message} if message else {})))
    return 1 if failed else 0


def _lines(path: str) -> list[dict[str, Any]]:
    out = []
    for raw in Path(path).read_text().splitlines():
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            out.append(value)
    return out


def _ratio(num: float | None, den: float | None) -> float | None:
    return round(num / den, 3) if num and den else None


def summarize(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures of a run (possibly several calls' lines concatenated), the ratios and the targets."""
    throughput: dict[tuple[str, str], float] = {}  # (step: tp8b or moe, layout) -> output tok/s
    latency: dict[int, float] = {}
    serve: dict[str, dict[str, Any]] = {}
    tests = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
    steps_not_ok = []
    for line in lines:
        if line.get("benchmark") == "parallel_throughput" and "output_tok_s" in line:
            throughput[(line.get("step", line["shape"]), line["layout"])] = line["output_tok_s"]
        elif line.get("benchmark") == "latency":
            latency[int(line.get("tensor_parallel_size", 1))] = line["decode_ms_per_token"]
        elif str(line.get("step", "")).startswith("serve-") and "output_throughput_tok_s" in line:
            serve[line["step"][len("serve-"):]] = line
        elif "outcome" in line and line.get("outcome") in tests:
            tests[line["outcome"]] += 1
        if line.get("status") in ("failed", "timeout", "skipped"):
            steps_not_ok.append(f"{line.get('step')}: {line['status']}")
    base = {shape: tok for (shape, layout), tok in throughput.items() if layout == "tp1"}
    ratios = {
        "tp2_throughput_over_tp1": _ratio(throughput.get(("tp8b", "tp2")), base.get("tp8b")),
        "dp2_throughput_over_tp1": _ratio(throughput.get(("tp8b", "dp2")), base.get("tp8b")),
        "tp2_latency_over_tp1": _ratio(latency.get(2), latency.get(1)),
    }
    verdict = {name: None if value is None else (value >= bound if op == ">=" else value <= bound)
               for name, value in ratios.items() for op, bound in [TARGETS[name]]}
    rows = [f"| {shape} | {layout} | {tok:,.0f} | {_ratio(tok, base.get(shape)) or '-'} |"
            for (shape, layout), tok in throughput.items()]
    rows += [f"| latency | tp{tp} | {ms} ms/token | {_ratio(ms, latency.get(1)) or '-'} |"
             for tp, ms in sorted(latency.items())]
    rows += [f"| serve c{s.get('max_concurrency', '?')} | {name} | {s['output_throughput_tok_s']:,.0f} online, "
             f"{s.get('offline_output_throughput_tok_s', 0):,.0f} offline | "
             f"{round(s['online_over_offline'], 3) if 'online_over_offline' in s else '-'} |"
             for name, s in serve.items()]
    table = "\n".join(["| run | layout | output tok/s | ratio (tp1 / offline) |", "|---|---|---|---|", *rows])
    return {"summary": "gpu_two", **ratios, "targets_met": verdict, "tests": tests,
            "steps_not_ok": steps_not_ok, "table_md": table}


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "tag":
        return tag(argv[1])
    if len(argv) == 3 and argv[0] == "junit":
        return junit(argv[1], argv[2])
    if len(argv) == 2 and argv[0] == "summary":
        result = summarize(_lines(argv[1]))
        print(json.dumps(result), flush=True)
        print(result["table_md"], file=sys.stderr)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
