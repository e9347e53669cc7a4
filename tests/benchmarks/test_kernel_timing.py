"""The graph-replay kernel timer: argument checks on the host; on a GPU, a copy's time against its bytes. The
profile tally of device time per kernel."""

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


def test_kernel_totals_sum_device_events_by_name() -> None:
    from types import SimpleNamespace

    from infercore.benchmarks.kernel_timing import kernel_totals

    cuda, cpu = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU
    events = [SimpleNamespace(device_type=cuda, name="gemm_kernel_long_name", device_time=3.0),
              SimpleNamespace(device_type=cuda, name="gemm_kernel_other_name", device_time=2.0),
              SimpleNamespace(device_type=cpu, name="aten::mm", device_time=0.0),
              SimpleNamespace(device_type=cuda, name="norm", device_time=1.5)]
    assert kernel_totals(events, width=11) == {"gemm_kernel": [2, 5.0], "norm": [1, 1.5]}



def test_heaviest_ranks_kernels_by_device_time() -> None:
    from infercore.benchmarks.kernel_timing import heaviest

    totals = {"norm": [4, 1500.0], "gemm": [2, 5000.0], "copy": [9, 20.0]}
    assert heaviest(totals, 2) == [("gemm", 2, 5.0), ("norm", 4, 1.5)]
