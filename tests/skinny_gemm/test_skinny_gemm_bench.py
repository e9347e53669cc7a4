"""The GPU benchmark's helpers on CPU: its shapes are the two models' projections, every setting it
sweeps computes the right product (through the interpreter), and its copy and bandwidth arithmetic."""

from __future__ import annotations

import importlib.util
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


def test_refinements_vary_split_warps_and_prefetch_around_the_best() -> None:
    best = bench.SkinnyConfig(4, 512, num_warps=4, split_k=2, dot=False)
    variants = bench.refinements(best, bench.Shape("m", "o_proj", 1024, 2048))
    assert {(v.split_k, v.num_warps, v.prefetch) for v in variants} == {(1, 4, True), (4, 4, True), (2, 8, True),
                                                                       (2, 4, False)}
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
