"""FP8 GEMMs on the GPU at Qwen3-8B's shapes against core's W8A8 references, and an FP8 checkpoint served
on the GPU (skipped without a GPU with FP8 tensor cores)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from gpu_marks import requires_gpu
from triton_cases import rel_err

from infercore.ops import fp8_math

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "quantization"))


def _has_fp8_tensor_cores() -> bool:
    return torch.cuda.is_available() and torch.version.hip is None and torch.cuda.get_device_capability() >= (8, 9)


pytestmark = [*requires_gpu, pytest.mark.skipif(not _has_fp8_tensor_cores(),
                                                reason="needs an NVIDIA GPU of compute capability 8.9+ (FP8 tensor cores)")]
#: Both sides quantize the activations with the same function; what differs is the order of the
#: float32 accumulation and the rounding of the bf16 output.
BOUND = 1e-2
#: (tokens, output features, input features): decode and prefill batches through Qwen3-8B's qkv, gate_up
#: and down projections.
SHAPES = [(1, 6144, 4096), (16, 24576, 4096), (200, 4096, 12288), (2048, 6144, 4096)]


def _weights(n: int, k: int, block: bool) -> tuple[torch.Tensor, torch.Tensor]:
    w = torch.randn(n, k, device="cuda") * 0.02
    if block:
        return fp8_math.quantize_blockwise(w, 128, 128)
    q, scale = fp8_math.quantize_per_token(w)
    return q, scale.reshape(-1)


def _cublas_block_scaling_missing() -> str | None:
    """Why cuBLASLt's block-scaled FP8 GEMM cannot be tested here (None: it can): not a Hopper GPU, or its probe
    (run here, once) refused this torch and driver."""
    if not (_has_fp8_tensor_cores() and torch.cuda.get_device_capability() == (9, 0)):
        return "cuBLASLt block scaling needs an NVIDIA GPU of compute capability 9.0 (Hopper)"
    from infercore_triton import fp8_block_cublas

    if not fp8_block_cublas.available(torch.device("cuda", 0)):
        return "this torch or driver refuses cuBLASLt block-scaled FP8 GEMMs (the probe's line in the log)"
    return None


CUBLAS_MISSING = _cublas_block_scaling_missing()


@pytest.mark.skipif(CUBLAS_MISSING is not None, reason=CUBLAS_MISSING or "")
@pytest.mark.parametrize(("m", "n", "k"), [*SHAPES, (67, 4096, 4096)])
def test_block_scaled_cublas_gemm_matches_the_reference(m: int, n: int, k: int,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """cuBLASLt's block scaling with the scales laid out as ``fp8_block_cublas`` lays them out, through the op from
    the threshold up (``INFERCORE_FP8_BLOCK_CUBLAS_MIN_M=1``: every size)."""
    from infercore_triton import fp8_block_cublas
    from infercore_triton.fp8_block_gemm import fp8_block_linear

    x = torch.randn(m, k, device="cuda").bfloat16()
    w, scale = _weights(n, k, block=True)
    assert fp8_block_cublas.fits(w, 128, 128, torch.bfloat16)
    monkeypatch.setenv(fp8_block_cublas.MIN_M_ENV, "1")
    calls: list[int] = []
    gemm = fp8_block_cublas.gemm
    monkeypatch.setattr(fp8_block_cublas, "gemm", lambda xq, *rest: calls.append(xq.shape[0]) or gemm(xq, *rest))
    bias = torch.randn(n, device="cuda").bfloat16()
    out = fp8_block_linear(x, w, scale, 128, 128, bias)
    assert calls == [m]
    assert out.dtype == torch.bfloat16
    assert rel_err(out, fp8_math.fp8_block_linear(x, w, scale, 128, 128, bias)) < BOUND


@pytest.mark.parametrize(("m", "n", "k"), SHAPES)
def test_block_scaled_triton_gemm_matches_the_reference(m: int, n: int, k: int, monkeypatch: pytest.MonkeyPatch) -> None:
    from infercore_triton import fp8_block_cublas
    from infercore_triton.fp8_block_gemm import fp8_block_linear

    monkeypatch.setenv(fp8_block_cublas.MIN_M_ENV, "0")  # the Triton kernel at every size (cuBLASLt has its own test)
    x = torch.randn(m, k, device="cuda").bfloat16()
    w, scale = _weights(n, k, block=True)
    bias = torch.randn(n, device="cuda").bfloat16()
    out = fp8_block_linear(x, w, scale, 128, 128, bias)
    assert out.dtype == torch.bfloat16
    assert rel_err(out, fp8_math.fp8_block_linear(x, w, scale, 128, 128, bias)) < BOUND


@pytest.mark.parametrize(("m", "n", "k"), SHAPES)
@pytest.mark.parametrize("static_input", [False, True])
def test_per_channel_scaled_mm_matches_the_reference(m: int, n: int, k: int, static_input: bool) -> None:
    from infercore_triton.fp8_scaled_mm import fp8_linear

    x = torch.randn(m, k, device="cuda").bfloat16()
    w, scale = _weights(n, k, block=False)
    input_scale = torch.tensor([x.float().abs().max() / fp8_math.FP8_MAX], device="cuda") if static_input else None
    out = fp8_linear(x, w, scale, None, input_scale)
    assert rel_err(out, fp8_math.fp8_linear(x, w, scale, None, input_scale)) < BOUND


@pytest.mark.parametrize(("m", "k", "group"), [(1, 4096, 128), (300, 12288, 128), (64, 4096, 4096)])
def test_activation_quantizer_is_the_reference(m: int, k: int, group: int) -> None:
    from infercore_triton.fp8_quant import quantize_groups

    x = torch.randn(m, k, device="cuda").bfloat16()
    q, scale = quantize_groups(x, group)
    ref_q, ref_scale = fp8_math.quantize_per_group(x, group)
    assert torch.equal(scale, ref_scale) and torch.equal(q.float(), ref_q.float())


def test_the_cuda_platform_runs_the_fp8_kernels() -> None:
    from infercore.ops import get_op
    from infercore_triton.fp8_block_gemm import fp8_block_linear
    from infercore_triton.fp8_scaled_mm import fp8_linear

    assert get_op("fp8_block_linear") is fp8_block_linear and get_op("fp8_linear") is fp8_linear


@pytest.mark.parametrize("scheme", ["block", "channel"])
def test_an_fp8_checkpoint_served_in_bf16_stays_close_to_its_dequantized_twin(tmp_path: Path, scheme: str) -> None:
    """Teacher-forced on the float32 twin's greedy outputs: logprobs within 0.5, top tokens agreeing at 75%
    of positions or more (W8A8 plus bf16 activations; the CPU test bounds W8A8 alone by 0.25 and 80%)."""
    from fp8_checkpoints import write_fp8_pair

    from infercore import LLM, SamplingParams
    from infercore.tiny_models import build_model_folder

    quantized, twin = write_fp8_pair(build_model_folder(tmp_path / "src"), tmp_path, scheme)
    prompts = ["hello world", "the cache block is a", "def add(a, b):", "json tool call weather city paris"]
    common = {"max_model_len": 256, "gpu_memory_utilization": 0.3}
    ref_llm = LLM(model=str(twin), dtype="float32", **common)
    ref = ref_llm.generate(prompts, SamplingParams(temperature=0, max_tokens=32, ignore_eos=True), use_tqdm=False)
    forced = [{"prompt_token_ids": r.prompt_token_ids + r.outputs[0].token_ids} for r in ref]
    params = SamplingParams(temperature=0, max_tokens=1, prompt_logprobs=1)
    theirs = ref_llm.generate(forced, params, use_tqdm=False)
    del ref_llm
    ours = LLM(model=str(quantized), dtype="bfloat16", **common).generate(forced, params, use_tqdm=False)
    worst, agree, positions = 0.0, 0, 0
    for a, b in zip(ours, theirs, strict=True):
        ids = a.prompt_token_ids
        for pos in range(1, len(ids)):
            pa, pb = a.prompt_logprobs[pos], b.prompt_logprobs[pos]
            worst = max(worst, abs(pa[ids[pos]].logprob - pb[ids[pos]].logprob))
            agree += min(pa, key=lambda t: pa[t].rank) == min(pb, key=lambda t: pb[t].rank)
            positions += 1
    assert worst < 0.5, f"{scheme}: teacher-forced logprobs differ by up to {worst:.3f}"
    assert agree / positions >= 0.75, f"{scheme}: top tokens agree at {agree}/{positions}"
