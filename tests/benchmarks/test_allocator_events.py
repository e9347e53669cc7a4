"""The allocator's event counters a benchmark reports: empty without a GPU, differences with one."""

from __future__ import annotations

from infercore.benchmarks.allocator_events import EVENTS, allocator_counters, increase


def test_counters_are_empty_without_a_gpu_and_increases_are_per_event() -> None:
    import torch

    counters = allocator_counters()
    assert counters == {} if not torch.cuda.is_available() else set(counters) == set(EVENTS)
    assert increase({"num_device_alloc": 3}, {"num_device_alloc": 5, "num_device_free": 1}) == {
        "num_device_alloc": 2, "num_device_free": 1}
