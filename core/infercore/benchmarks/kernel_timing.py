"""Device time of one kernel call, without the host's launch cost.

``triton.testing.do_bench`` times each call between two events with a cache flush launched just before it.
When the host takes longer to launch the call (argument packing, small allocations, a second kernel) than the
device takes to run the flush, the device idles between the start event and the kernel, and that idle time is
counted: a 40 µs kernel can read as 40 or as 100 µs from one run to the next. Engine steps replay kernels from
CUDA graphs, where no such gap exists. :func:`graph_median_us` times calls the same way: a graph of ``calls``
(flush, call) pairs against a graph of the flushes alone, so only the device's work is counted.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import torch

#: Bytes written before each call to evict the previous call's data from L2 (an H200 has 50 MB of it).
FLUSH_BYTES = 256 * 1024 * 1024


def _graph(body: Callable[[], Any], stream: torch.cuda.Stream) -> torch.cuda.CUDAGraph:
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        body()
    return graph


def _replay_ms(graph: torch.cuda.CUDAGraph) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def graph_median_us(fn: Callable[[], Any], calls: int = 10, repeats: int = 15, flush: bool = True) -> float:
    """Median microseconds of one call of ``fn`` on the current CUDA device, replayed from CUDA graphs.

    ``fn`` must be capturable (no host synchronisation; allocations come from the graph's pool). Each repeat
    replays a graph of ``calls`` calls, each after an L2 flush (``flush``), and a graph of the flushes alone;
    a repeat's figure is their difference over ``calls``.
    """
    if calls < 1 or repeats < 1:
        raise ValueError("graph_median_us needs at least one call and one repeat")
    buffer = torch.empty(FLUSH_BYTES if flush else 0, dtype=torch.int8, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # compiles and warms up outside the capture
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()

    def timed() -> None:
        for _ in range(calls):
            buffer.zero_()
            fn()

    def flushes() -> None:
        for _ in range(calls):
            buffer.zero_()

    with_calls, alone = _graph(timed, stream), _graph(flushes, stream)
    _replay_ms(with_calls), _replay_ms(alone)
    samples = [(_replay_ms(with_calls) - _replay_ms(alone)) / calls * 1e3 for _ in range(repeats)]
    return statistics.median(samples)


def kernel_totals(events: Any, width: int = 90) -> dict[str, list[float]]:
    """``{kernel name (first width characters): [calls, device µs]}`` of a torch profiler's ``events()``."""
    totals: dict[str, list[float]] = {}
    for ev in events:
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            entry = totals.setdefault(ev.name[:width], [0, 0.0])
            entry[0] += 1
            entry[1] += ev.device_time
    return totals


def heaviest(totals: dict[str, list[float]], count: int) -> list[tuple[str, int, float]]:
    """The ``count`` kernels of :func:`kernel_totals` with the most device time: ``(name, calls, device ms)``."""
    ranked = sorted(totals.items(), key=lambda kv: -kv[1][1])[:count]
    return [(name, int(calls), round(us / 1000, 3)) for name, (calls, us) in ranked]
