"""scripts/serving_verdict.py judges a gpu_serving.sh run's JSON lines against the serving acceptance;
scripts/pyspy_summary.py turns py-spy speedscope profiles into text."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


verdict_mod = _load("serving_verdict")
summary_mod = _load("pyspy_summary")


def _run_lines(c256_ratio: float = 0.95, itl_p99: float = 5.0, ttft: float = 30.0,
               tpot: float = 1.5) -> list[dict]:
    """JSON lines as gpu_serving.sh writes them (only the fields the verdict reads, plus noise)."""
    return [
        {"label": "c1", "completed": 20, "failed": 0, "ttft_p50_ms": ttft, "tpot_p50_ms": tpot},
        {"label": "c64", "completed": 256, "failed": 0, "itl_p99_ms": itl_p99, "tpot_p50_ms": 2.0},
        {"label": "c256", "completed": 1024, "failed": 0, "output_throughput_tok_s": 30000 * c256_ratio,
         "offline_output_throughput_tok_s": 30000.0, "online_over_offline": c256_ratio,
         "offline_prefill_p50_ms": 27.0},
        *[{"label": "sweep", "completed": 128, "failed": 0, "request_rate": rate, "output_throughput_tok_s": 1.0,
           "ttft_p50_ms": 1.0, "ttft_p99_ms": 2.0, "tpot_p50_ms": 1.0, "tpot_p99_ms": 2.0} for rate in (4.0, 16.0)],
        {"benchmark": "latency", "ttft_ms": 3.0, "decode_ms_per_token": 1.48},
    ]


def test_a_run_meeting_every_bound_passes() -> None:
    result = verdict_mod.verdict(_run_lines())
    assert result["all_pass"] and result["missing"] == []
    assert result["c64_itl_p99_over_tpot_p50"] == pytest.approx(2.5)
    assert result["c1_ttft_minus_prefill_ms"] == pytest.approx(3.0)
    assert result["offline_prefill_ms"] == 27.0  # the probes, not bench latency's ttft_ms
    assert result["c1_tpot_over_latency"] == pytest.approx(1.5 / 1.48)
    assert [row["request_rate"] for row in result["sweep"]] == [4.0, 16.0]


def test_every_c64_run_is_judged_and_the_worst_reported() -> None:
    lines = _run_lines(itl_p99=5.0)
    lines.insert(2, {"label": "c64", "completed": 256, "failed": 0, "itl_p99_ms": 7.0, "tpot_p50_ms": 2.0})
    result = verdict_mod.verdict(lines)
    assert result["c64_runs"] == pytest.approx([2.5, 3.5])
    assert result["c64_itl_p99_over_tpot_p50"] == pytest.approx(3.5) and result["c64_itl_p99_ms"] == 7.0
    assert result["c64_pass"] is False and not result["all_pass"]


@pytest.mark.parametrize(("change", "flag"), [
    ({"c256_ratio": 0.85}, "c256_pass"),
    ({"itl_p99": 6.5}, "c64_pass"),
    ({"ttft": 32.5}, "c1_ttft_pass"),
    ({"tpot": 1.48 * 1.06}, "c1_tpot_pass"),
])
def test_each_bound_fails_on_its_own(change: dict, flag: str) -> None:
    result = verdict_mod.verdict(_run_lines(**change))
    assert result[flag] is False and not result["all_pass"]
    assert all(v for k, v in result.items() if k.endswith("_pass") and k not in (flag, "all_pass"))


def test_missing_runs_are_named_not_passed(tmp_path: Path) -> None:
    lines = [r for r in _run_lines() if r.get("label") not in ("c64", "sweep")]
    path = tmp_path / "serving.jsonl"
    path.write_text("== a log line\n" + "\n".join(json.dumps(r) for r in lines) + "\n| a table |\n")
    result = verdict_mod.verdict(verdict_mod.read_lines(path))
    assert result["c64_pass"] is None and result["missing"] == ["c64_pass", "sweep"]
    assert not result["all_pass"]


def test_failed_requests_fail_the_verdict() -> None:
    lines = _run_lines()
    lines[0]["failed"] = 1
    assert verdict_mod.verdict(lines)["failed_requests"] == 1
    assert not verdict_mod.verdict(lines)["all_pass"]


def test_cli_prints_one_json_line_and_tables(tmp_path: Path) -> None:
    path = tmp_path / "serving.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in _run_lines()) + "\n")
    result = subprocess.run([sys.executable, str(SCRIPTS / "serving_verdict.py"), str(path)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    [line] = result.stdout.splitlines()
    assert json.loads(line)["all_pass"] is True
    assert "| 16.0 | 128 |" in result.stderr
    missing = subprocess.run([sys.executable, str(SCRIPTS / "serving_verdict.py"), str(tmp_path / "none.jsonl")],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "does not exist" in missing.stderr


def _speedscope() -> dict:
    frames = [{"name": "<module>", "file": "/x/serve.py", "line": 1}, {"name": "loop", "file": "/x/serve.py", "line": 9},
              {"name": "encode", "file": "/x/sse.py", "line": 3}, {"name": "poll", "file": "/x/zmq.py", "line": 5}]
    return {"shared": {"frames": frames}, "profiles": [
        {"type": "sampled", "name": "MainThread", "unit": "seconds",
         "samples": [[0, 1, 2], [0, 1, 2], [0, 1], [0, 1, 2]], "weights": [0.01, 0.01, 0.01, 0.01]},
        {"type": "sampled", "name": "io", "unit": "seconds", "samples": [[3], [3]], "weights": [0.01, 0.01]},
    ]}


def test_profile_summary_counts_self_and_total_time() -> None:
    summary = summary_mod.summarize(_speedscope())
    assert summary.total == pytest.approx(0.06)
    assert summary.self_time["encode (sse.py:3)"] == pytest.approx(0.03)
    assert summary.self_time["loop (serve.py:9)"] == pytest.approx(0.01)
    assert summary.total_time["loop (serve.py:9)"] == pytest.approx(0.04)
    assert summary.threads["io"] == pytest.approx(0.02)
    text = summary_mod.render("engine", summary, top=2)
    self_part = text.split("by self time")[1].split("###")[0]
    assert self_part.splitlines()[1].strip() == "50.0%  encode (sse.py:3)"
    assert len(self_part.strip().splitlines()) == 2  # --top


def test_profile_summary_cli_reports_unreadable_files(tmp_path: Path) -> None:
    good = tmp_path / "engine.speedscope.json"
    good.write_text(json.dumps(_speedscope()))
    bad = tmp_path / "api.speedscope.json"
    bad.write_text("not json")
    result = subprocess.run([sys.executable, str(SCRIPTS / "pyspy_summary.py"), str(good), str(bad)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "encode (sse.py:3)" in result.stdout and "not readable" in result.stdout


def test_without_probes_bench_latency_ttft_is_the_prefill_reference() -> None:
    lines = [r for r in _run_lines() if r.get("label") != "c256"]
    result = verdict_mod.verdict(lines)
    assert result["offline_prefill_ms"] == 3.0
    assert result["offline_prefill_source"].startswith("ttft_ms of bench latency")
    assert result["c1_ttft_minus_prefill_ms"] == pytest.approx(27.0) and result["c1_ttft_pass"] is False
