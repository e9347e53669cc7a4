"""The graph-replay kernel timer: argument checks on the host; on a GPU, a copy's time against its bytes."""

from __future__ import annotations

import pytest
import torch

from infercore.benchmarks.kernel_timing import graph_median_us


def test_it_needs_a_call_and_a_repeat() -> None:
    with pytest.raises(ValueError, match="at least one call"):
        graph_median_us(lambda: None, calls=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="times CUDA graphs: needs a GPU")
def test_a_copy_takes_about_its_bytes_over_the_bandwidth() -> None:
    src = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    us = graph_median_us(lambda: dst.copy_(src))
    # 512 MB moved: between 0.3 and 10 TB/s on any current GPU, whatever the launch cost of the host.
    assert 2 * src.numel() / 10e12 * 1e6 < us < 2 * src.numel() / 0.3e12 * 1e6
    # A tiny call measures the device's few microseconds, not the host's launch.
    small = torch.zeros(16, device="cuda")
    assert graph_median_us(lambda: small.add_(1)) < 20
