"""benchmarks/parallel_throughput.py's layouts (pipeline, expert and data+expert parallelism on a tiny MoE
shape, CPU/gloo), `bench latency` over two tensor-parallel ranks, and scripts/gpu_two_report.py's lines."""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


bench = _load(ROOT / "benchmarks" / "parallel_throughput.py")
report = _load(ROOT / "scripts" / "gpu_two_report.py")


@pytest.mark.parametrize(("layout", "expected"), [
    ("tp2", {"tensor_parallel_size": 2}),
    ("pp2", {"pipeline_parallel_size": 2}),
    ("dp2", {"data_parallel_size": 2}),
    ("ep2", {"tensor_parallel_size": 2, "enable_expert_parallel": True}),
    ("dp2ep2", {"data_parallel_size": 2, "enable_expert_parallel": True}),
    ("tp2pp2", {"tensor_parallel_size": 2, "pipeline_parallel_size": 2}),
])
def test_layout_arguments(layout: str, expected: dict) -> None:
    assert bench.layout_args(layout) == expected


@pytest.mark.parametrize("layout", ["tp", "xp2", "tp2tp2", "dp2ep3", "tp0", "tp2 "])
def test_bad_layouts_are_refused(layout: str) -> None:
    with pytest.raises(ValueError):
        bench.layout_args(layout)


def test_new_layouts_serve_every_request_on_a_tiny_moe(capsys: pytest.CaptureFixture[str]) -> None:
    workload = bench.workload_of("tiny-moe", num_requests=3, dtype="float32", max_model_len=64, input_len=8,
                                 output_len=4)
    lines = bench.measure("tiny-moe", ["tp1", "pp2", "ep2", "dp2ep2", "tp2pp2"], workload,
                          {"cpu_threads": 1, "num_gpu_blocks_override": 32}, max_devices=2)
    assert [line["layout"] for line in lines] == ["tp1", "pp2", "ep2", "dp2ep2", "tp2pp2"]
    for line in lines[:4]:
        assert "error" not in line, line
        assert line["output_tokens"] == 3 * 4 and line["vs_tp1"] > 0
    assert lines[4]["skipped"] == "needs 4 devices, 2 here"
    printed = [json.loads(raw) for raw in capsys.readouterr().out.splitlines()]
    assert printed == lines


def test_bench_latency_over_two_tensor_parallel_ranks(capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from infercore.benchmarks import latency

    monkeypatch.setenv("INFERCORE_CPU_THREADS", "1")
    args = argparse.Namespace(workload="w-cpu", input_len=8, output_len=3, repeats=1, enforce_eager=False,
                              max_num_seqs=4, tensor_parallel_size=2, speculative_config=None,
                              benchmark_acceptance_rate=[None], prompt_period=None)
    assert latency.run(args) == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["tensor_parallel_size"] == 2 and line["decode_ms_per_token"] > 0


def test_report_tags_lines_and_judges_the_targets(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO('..{"layout": "tp1"}\nnot json {\n'))
    report.tag("tp8b")
    out, err = capsys.readouterr()
    assert json.loads(out) == {"step": "tp8b", "layout": "tp1"} and "not json" in err
    lines = [
        {"step": "tp8b", "benchmark": "parallel_throughput", "shape": "qwen3-8b", "layout": "tp1", "output_tok_s": 100},
        {"step": "tp8b", "benchmark": "parallel_throughput", "shape": "qwen3-8b", "layout": "tp2", "output_tok_s": 170},
        {"step": "tp8b", "benchmark": "parallel_throughput", "shape": "qwen3-8b", "layout": "dp2", "output_tok_s": 180},
        {"step": "latency-tp1", "benchmark": "latency", "tensor_parallel_size": 1, "decode_ms_per_token": 10.0},
        {"step": "latency-tp2", "benchmark": "latency", "tensor_parallel_size": 2, "decode_ms_per_token": 6.0},
        {"step": "serve-dp2", "output_throughput_tok_s": 90.0, "offline_output_throughput_tok_s": 100.0,
         "online_over_offline": 0.9, "max_concurrency": 256},
        {"step": "tests-tp", "test": "t", "outcome": "passed"},
        {"step": "moe", "status": "timeout"},
    ]
    summary = report.summarize(lines)
    assert summary["tp2_throughput_over_tp1"] == 1.7 and summary["dp2_throughput_over_tp1"] == 1.8
    assert summary["targets_met"] == {"tp2_throughput_over_tp1": True, "dp2_throughput_over_tp1": False,
                                      "tp2_latency_over_tp1": True}
    assert summary["tests"]["passed"] == 1 and summary["steps_not_ok"] == ["moe: timeout"]
    assert "| serve c256 | dp2 | 90 online, 100 offline | 0.9 |" in summary["table_md"]


def test_report_reads_a_junit_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    xml = tmp_path / "r.xml"
    xml.write_text('<testsuites><testsuite><testcase classname="a" name="ok" time="1.5"/>'
                   '<testcase classname="a" name="bad"><failure message="boom"/></testcase>'
                   '<testcase classname="a" name="gpu"><skipped message="no GPU"/></testcase></testsuite></testsuites>')
    assert report.junit("tests-tp", str(xml)) == 1
    lines = [json.loads(raw) for raw in capsys.readouterr().out.splitlines()]
    assert [(line["test"], line["outcome"]) for line in lines] == [("a::ok", "passed"), ("a::bad", "failed"),
                                                                   ("a::gpu", "skipped")]
    assert lines[1]["message"] == "boom"
