"""The CPU KV cache starts as zeros without writing them: a cache of a gigabyte costs almost nothing
to make (no resident memory until written), reads as zeros, and keeps what is written to it."""

from __future__ import annotations

import gc

import pytest
import torch

from infercore.kv_cache.zeroed import zeroed

CPU = torch.device("cpu")


def _rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float8_e4m3fn])
def test_reads_as_zeros_and_keeps_writes(dtype: torch.dtype) -> None:
    cache = zeroed((2, 64, 16, 2, 8), dtype, CPU)
    assert cache.shape == (2, 64, 16, 2, 8) and cache.dtype == dtype
    assert torch.equal(cache.float(), torch.zeros(cache.shape))
    cache[1, 3] = 1
    gc.collect()  # the tensor alone keeps its memory alive
    assert cache.float().sum().item() == 16 * 2 * 8


def test_a_gigabyte_cache_is_not_resident_until_written() -> None:
    before = _rss_bytes()
    cache = zeroed((2, 16384, 16, 4, 128), torch.float32, CPU)  # 1 GiB
    assert cache.numel() * 4 == 2**30
    assert _rss_bytes() - before < 64 * 2**20
    cache[0, :16] = 1.0  # written blocks become resident, the rest stays free
    assert _rss_bytes() - before < 64 * 2**20
