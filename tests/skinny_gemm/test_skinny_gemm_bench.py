"""The GPU benchmark's helpers on CPU: its shapes are the two models' projections, every setting it
sweeps computes the right product (through the interpreter), and its copy and bandwidth arithmetic."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from infercore_triton.skinny_gemm import skinny_gemm

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "skinny_gemm.py"
_SPEC = importlib.util.spec_from_file_location("skinny_gemm_benchmark", _PATH)
bench = importlib.util.module_from_spec(_SPEC)
sys.modules[_SPEC.name] = bench  # its dataclasses look their module up there
_SPEC.loader.exec_module(bench)


def test_shapes_are_the_projections_of_qwen3_0_6b_and_8b() -> None:
    shapes = {(s.model, s.name): (s.n, s.k) for s in bench.SHAPES}
    assert {name: nk for (model, name), nk in shapes.items() if model == "qwen3-0.6b"} == {
        "qkv_proj": (4096, 1024), "gate_up_proj": (6144, 1024), "o_proj": (1024, 2048),
        "down_proj": (1024, 3072), "lm_head": (151936, 1024)}
    assert {name: nk for (model, name), nk in shapes.items() if model == "qwen3-8b"} == {
        "qkv_proj": (6144, 4096), "gate_up_proj": (24576, 4096), "o_proj": (4096, 4096),
        "down_proj": (4096, 12288), "lm_head": (151936, 4096)}
    assert bench.SHAPES[0].weight_bytes() == 4096 * 1024 * 2


@pytest.mark.parametrize("m", [1, 3, 8, 16])
def test_every_swept_setting_computes_the_product(m: int) -> None:
    # A small GPU (8 SMs) so that the narrow shape still splits K for some tiles.
    shape = bench.Shape("tiny", "proj", 40, 600)
    gen = torch.Generator().manual_seed(m)
    x, w = torch.randn(m, shape.k, generator=gen), torch.randn(shape.n, shape.k, generator=gen)
    first = bench.sweep_configs(m, shape, num_sms=8)
    assert len(first) == len(set(first)) and 4 <= len(first) <= 12
    assert any(c.split_k > 1 for c in first) and all(c.split_k == 1 or shape.k >= c.split_k * c.block_k for c in first)
    for config in first + bench.refinements(first[-1], shape):
        out = skinny_gemm(x, w, config=config)
        assert float((out - F.linear(x, w)).abs().max()) < 1e-4 * float(out.abs().max()), config


def test_refinements_vary_split_and_prefetch_or_warps_around_the_best() -> None:
    best = bench.SkinnyConfig(4, 512, num_warps=4, split_k=2, dot=False)
    variants = bench.refinements(best, bench.Shape("m", "o_proj", 1024, 2048))
    assert {(v.split_k, v.num_warps, v.prefetch) for v in variants} == {(1, 4, True), (4, 4, True), (2, 4, False)}
    dot = bench.SkinnyConfig(16, 256, num_warps=8, split_k=8, dot=True)
    assert {(v.split_k, v.num_warps) for v in bench.refinements(dot, bench.Shape("m", "o_proj", 1024, 2048))} == {
        (4, 8), (8, 4)}


def test_weight_copies_outrun_the_l2_within_one_per_call() -> None:
    l2 = 60 * 2**20
    assert bench.weight_copies(4 * 2**20, l2) == bench.GRAPH_CALLS
    assert bench.weight_copies(96 * 2**20, l2) == 5
    assert bench.weight_copies(2**30, l2) == 2


def test_bandwidth_is_weight_bytes_per_microsecond() -> None:
    assert bench.tb_per_s(8 * 2**20, 2.0) == pytest.approx(8 * 2**20 / 2e-6 / 1e12)


def test_step_summary_counts_each_projection_once_per_layer() -> None:
    records = [{"model": s.model, "shape": s.name, "m": 1, "triton_graph_us": 2.0, "torch_graph_us": 5.0}
               for s in bench.SHAPES if s.model == "qwen3-0.6b"]
    partial = [{**r, "model": "qwen3-8b"} for r in records[:2]]
    [summary] = bench.step_summaries(records + partial)
    # Four projections in each of 28 layers, plus the LM head once.
    assert summary["model"] == "qwen3-0.6b" and summary["triton_graph_us"] == 2.0 * (4 * 28 + 1)
    assert summary["saved_us"] == 3.0 * (4 * 28 + 1)


def test_a_swept_record_names_its_settings_and_is_json(monkeypatch: pytest.MonkeyPatch) -> None:
    # Timers favouring elementwise, unprefetched, narrow-K settings (each setting's product is checked
    # above), and graph timers that run one call (interpreted).
    def fake_time_each(x, weights, shape, configs):  # noqa: ANN001, ANN202
        return [(10.0 * bool(c.dot) + c.prefetch + c.block_k / 1e4, c) for c in configs]

    def fake_graph_us(calls: list) -> float:  # noqa: ANN001
        calls[0]()
        return 1.0

    monkeypatch.setattr(bench, "_time_each", fake_time_each)
    monkeypatch.setattr(bench, "graph_us", fake_graph_us)
    monkeypatch.setattr(bench, "bench_us", lambda fn: (fn(), 2.0)[1])
    shape = bench.Shape("tiny", "proj", 40, 600)
    weights = [torch.randn(shape.n, shape.k).to(torch.bfloat16) for _ in range(2)]
    record = bench.run_shape(shape, 3, weights, sweep=True, num_sms=8)
    assert json.loads(json.dumps(record)) == record
    assert (record["config"]["block_k"], record["config"]["dot"], record["config"]["prefetch"]) == (256, False, False)
    assert record["tuned"] == [[4, 40, 600], record["config"]] and record["max_rel_err"] < 1e-2
    assert record["triton_us"] == 2.0 and record["triton_graph_us"] == 1.0 and "default_graph_us" in record
    assert record["triton_graph_tb_s"] == pytest.approx(bench.tb_per_s(shape.weight_bytes(), 1.0), rel=1e-2)


def test_table_takes_the_kernel_only_where_it_beats_cublas_by_the_margin() -> None:
    config = {"block_n": 8, "block_k": 1024, "num_warps": 4, "num_stages": 3, "split_k": 1, "dot": False,
              "prefetch": True}
    records = [{"m": 1, "n": 24576, "k": 4096, "triton_graph_us": 70.0, "torch_graph_us": 80.0, "config": config},
               {"m": 2, "n": 24576, "k": 4096, "triton_graph_us": 79.0, "torch_graph_us": 80.0, "config": config},
               {"m": 3, "n": 4096, "k": 4096, "triton_graph_us": 30.0, "torch_graph_us": 20.0, "config": config}]
    table = bench.table_choices(records, margin=0.03)
    assert table.choice(1, 24576, 4096).kernel == "skinny" and table.choice(1, 24576, 4096).config == config
    assert table.choice(2, 24576, 4096).kernel == "cublas"  # 1.25% faster: under the margin
    assert table.choice(4, 4096, 4096).kernel == "cublas"  # bucket of 3 rows is 4
    assert json.loads(json.dumps(table.to_json()))["choices"][0]["m"] == 1
