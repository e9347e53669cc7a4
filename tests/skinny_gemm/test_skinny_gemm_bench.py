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
    gen = torch.Generator().manual_seed(m)
    x, w = torch.randn(m, 200, generator=gen), torch.randn(24, 200, generator=gen)
    configs = bench.sweep_configs(m)
    assert len(configs) == len(set(configs)) and 8 <= len(configs) <= 24
    for config in configs:
        out = skinny_gemm(x, w, config=config)
        assert float((out - F.linear(x, w)).abs().max()) < 1e-4 * float(out.abs().max()), config


def test_fits_keeps_full_k_blocks_per_split_and_a_program_per_sm() -> None:
    o_proj = bench.Shape("m", "o_proj", 1024, 2048)
    assert bench.fits(bench.SkinnyConfig(4, 256, split_k=4), o_proj, 132)
    assert not bench.fits(bench.SkinnyConfig(4, 512, split_k=4), o_proj, 132)
    assert not bench.fits(bench.SkinnyConfig(16, 256), o_proj, 132)


def test_weight_copies_outrun_the_l2_within_one_per_call() -> None:
    l2 = 60 * 2**20
    assert bench.weight_copies(4 * 2**20, l2) == bench.GRAPH_CALLS
    assert bench.weight_copies(96 * 2**20, l2) == 5
    assert bench.weight_copies(2**30, l2) == 2


def test_bandwidth_is_weight_bytes_per_microsecond() -> None:
    assert bench.tb_per_s(8 * 2**20, 2.0) == pytest.approx(8 * 2**20 / 2e-6 / 1e12)
