"""The Triton attention kernels launched with each GPU platform's typed kernel settings (dot precision
from the platform, not from the dtype alone), run in Triton's interpreter against the reference."""

from __future__ import annotations

import pytest
import torch
from triton_cases import TOLERANCE, make_case, reference_attention, rel_err

from infercore.attention import CommonAttentionMetadata
from infercore.attention.spec import AttentionLayerSpec
from infercore.kv_cache.spec import KVCacheSpec
from infercore.platforms import set_current_platform
from infercore_cuda.platform import CudaPlatform
from infercore_rocm.platform import RocmPlatform
from infercore_triton.backend import TritonAttentionBackend
from infercore_triton.decode_attention import dot_precision
from infercore_xpu.platform import XpuPlatform

PLATFORMS = [CudaPlatform, RocmPlatform, XpuPlatform]


@pytest.fixture(params=PLATFORMS, ids=[p.name for p in PLATFORMS])
def gpu_platform(request: pytest.FixtureRequest):
    platform = request.param()
    set_current_platform(platform)
    yield platform
    set_current_platform(None)


def test_dot_precision_comes_from_the_platform(gpu_platform) -> None:  # noqa: ANN001
    settings = gpu_platform.capabilities.kernel
    assert dot_precision(torch.bfloat16) == settings.half_dot_precision
    assert dot_precision(torch.float32) == settings.fp32_dot_precision == "ieee"
    if gpu_platform.name in ("rocm", "xpu"):
        assert dot_precision(torch.float16) == "ieee", "AMD's and Intel's Triton backends refuse tf32 here"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_attention_runs_with_the_platforms_settings(gpu_platform, dtype: torch.dtype) -> None:  # noqa: ANN001
    case = make_case([40, 7, 64, 20], [1, 1, 10, 20], 8, 2, 64, 16, dtype, seed=3)
    common = CommonAttentionMetadata(
        num_reqs=4, num_actual_tokens=case.q.shape[0], max_query_len=case.max_query_len,
        max_seq_len=int(case.seq_lens.max()), query_start_loc=case.query_start_loc, seq_lens=case.seq_lens,
        block_table=case.block_table, slot_mapping=case.slot_mapping,
        query_start_loc_cpu=case.query_start_loc.cpu(), seq_lens_cpu=case.seq_lens.cpu())
    meta = TritonAttentionBackend.get_builder_cls()(KVCacheSpec(16, 2, 64, dtype), torch.device("cpu"), 8,
                                                    256).build(common)
    impl = TritonAttentionBackend.get_impl_cls()(AttentionLayerSpec(num_heads=8, head_size=64, scale=0.125,
                                                                    num_kv_heads=2, dtype=dtype, kv_cache_dtype=dtype))
    out = torch.full_like(case.q, float("nan"))
    impl.forward(case.q, case.k, case.v, case.kv_cache, meta, out)
    assert rel_err(out, reference_attention(case, 0.125)) < TOLERANCE[dtype]
