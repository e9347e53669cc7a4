"""The skinny GEMM on the GPU at the W-GPU model's shapes (Qwen3-0.6B) and Qwen3-8B's: every row bucket
against a float32 product of the same bf16 inputs, split-K and edge tile settings, and the ``linear``
op replayed in a CUDA graph."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from gpu_marks import requires_gpu

from infercore_triton import skinny_gemm as sg

pytestmark = requires_gpu
BOUND = 1e-2
#: (N, K) of qkv_proj, gate_up, o_proj, down_proj and the tied LM head; then Qwen3-8B's four projections.
SHAPES = [(4096, 1024), (6144, 1024), (1024, 2048), (1024, 3072), (151936, 1024),
          (6144, 4096), (24576, 4096), (4096, 4096), (4096, 12288)]


def _rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.float() - ref).abs().max() / ref.abs().max())


def _inputs(m: int, n: int, k: int, dtype: torch.dtype = torch.bfloat16):
    gen = torch.Generator(device="cuda").manual_seed(m * 7 + n + k)
    x = torch.randn(m, k, device="cuda", generator=gen).to(dtype)
    w = (torch.randn(n, k, device="cuda", generator=gen) * k**-0.5).to(dtype)
    return x, w, torch.randn(n, device="cuda", generator=gen).to(dtype)


@pytest.mark.parametrize("m", [1, 2, 3, 4, 8, 16])
@pytest.mark.parametrize("shape", SHAPES, ids=[f"{n}x{k}" for n, k in SHAPES])
def test_model_shapes_match_a_float32_product(m: int, shape: tuple[int, int]) -> None:
    x, w, b = _inputs(m, *shape)
    ref = F.linear(x.float(), w.float())
    assert _rel_err(sg.skinny_gemm(x, w), ref) < BOUND
    assert _rel_err(sg.skinny_gemm(x, w, b), ref + b.float()) < BOUND


CONFIGS = [sg.SkinnyConfig(block_n=1, block_k=1024, num_warps=8, split_k=1, dot=False),
           sg.SkinnyConfig(block_n=4, block_k=256, num_warps=4, num_stages=4, split_k=4, dot=False),
           sg.SkinnyConfig(block_n=8, block_k=512, num_warps=8, split_k=1, dot=False, prefetch=False),
           sg.SkinnyConfig(block_n=16, block_k=128, num_warps=4, split_k=8, dot=True),
           sg.SkinnyConfig(block_n=32, block_k=256, num_warps=8, num_stages=2, split_k=3, dot=True)]


@pytest.mark.parametrize("config", CONFIGS, ids=[str(i) for i in range(len(CONFIGS))])
@pytest.mark.parametrize("m", [1, 5])
def test_tile_and_split_settings_compute_the_same_product(config: sg.SkinnyConfig, m: int) -> None:
    # o_proj's shape, with x a row-strided column slice of a wider activation.
    wide, w, b = _inputs(m, 1024, 2048 + 64)
    x, w = wide[:, 64:], w[:, 64:].contiguous()
    assert _rel_err(sg.skinny_gemm(x, w, b, config), F.linear(x.float(), w.float(), b.float())) < BOUND


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_linear_op_replays_in_a_cuda_graph(dtype: torch.dtype) -> None:
    x, w, b = _inputs(4, 1024, 3072, dtype)
    assert sg.uses_kernel(x, w, b)
    static_x = x.clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        sg.linear(static_x, w, b)  # compiles outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = sg.linear(static_x, w, b)
    for seed in (1, 2):
        fresh = torch.randn(4, 3072, device="cuda", generator=torch.Generator(device="cuda").manual_seed(seed))
        static_x.copy_(fresh.to(dtype))
        graph.replay()
        torch.cuda.synchronize()
        assert _rel_err(static_out, F.linear(static_x.float(), w.float(), b.float())) < BOUND


def test_linear_leaves_large_batches_to_f_linear() -> None:
    x, w, b = _inputs(sg.SKINNY_MAX_M + 1, 1024, 2048)
    assert not sg.uses_kernel(x, w, b)
    assert torch.equal(sg.linear(x, w, b), F.linear(x, w, b))


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9,
                    reason="programmatic dependent launches need an sm_90 or later GPU (H100/H200)")
def test_programmatic_dependent_launch_reads_the_kernel_in_front(monkeypatch: pytest.MonkeyPatch) -> None:
    """``INFERCORE_PDL=1``: the skinny GEMM, launched as a programmatic dependent of the kernel that writes its
    input (a long one, so the GEMM starts while it runs), replayed in a CUDA graph, reads that kernel's output,
    not what the buffer held before; a normal launch after it reads the GEMM's."""
    from infercore_triton import pdl

    monkeypatch.setenv(pdl.PDL_ENV, "1")
    assert pdl.pdl_enabled(torch.device("cuda"))
    src, w, _ = _inputs(1, 1024, 3072)
    big = torch.randn(4096, 4096, device="cuda")
    static_src, static_x = src.clone(), torch.zeros_like(src)

    def step() -> torch.Tensor:
        torch.mm(big, big)  # keeps the GPU busy, so the dependent launch overlaps its predecessor
        static_x.copy_(static_src * 2)
        return sg.linear(static_x, w) * 1  # a normal launch after the dependent one

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = step()
    for seed in (1, 2, 3):
        static_x.zero_()
        fresh = torch.randn(src.shape, device="cuda", generator=torch.Generator(device="cuda").manual_seed(seed))
        static_src.copy_(fresh.to(src.dtype))
        graph.replay()
        torch.cuda.synchronize()
        assert _rel_err(static_out, F.linear((static_src * 2).float(), w.float())) < BOUND
