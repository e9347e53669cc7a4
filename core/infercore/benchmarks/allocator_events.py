"""Counting the caching allocator's stalling events while a benchmark runs.

A device allocation or free (``cudaMalloc`` / ``cudaFree``) synchronises the device, and a failed
allocation makes the allocator free its cache and retry; either inside a timed region idles the
device behind the host. The throughput benchmark and ``benchmarks/step_timeline.py`` report how many
happened, so a run that paid for them can be told apart from one that did not.
"""

from __future__ import annotations

#: Device allocations and frees, flush-and-retry after a failed allocation, and whole-device syncs.
EVENTS = ("num_device_alloc", "num_device_free", "num_alloc_retries", "num_sync_all_streams")


def allocator_counters() -> dict[str, int]:
    """The CUDA caching allocator's event counters now; empty without a CUDA device."""
    import torch  # here: the CLI imports this module to build its parser, and torch takes seconds

    if not torch.cuda.is_available():
        return {}
    stats = torch.cuda.memory_stats()
    return {name: int(stats.get(name, 0)) for name in EVENTS}


def increase(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """How much each counter grew from ``before`` to ``after``."""
    return {name: value - before.get(name, 0) for name, value in after.items()}
