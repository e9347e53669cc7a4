"""Torch threads for a shared machine: as many as the CPUs this process may use and nobody else is using.

An OpenMP parallel region ends when its slowest thread does, so a thread that shares its core with a
busy neighbour stalls every op of the step (the scheduler hands that core back only every few
milliseconds). Fewer threads, each with a core of its own, are faster then. So the budget is:

* the CPUs this process may use at all (:func:`infercore.cpus.available_cpus`: its affinity mask, lowered
  to a cgroup CPU quota), which torch's own default ignores;
* minus what other processes keep busy on those CPUs, measured from ``/proc/stat`` against this
  process's own CPU time over the last interval, re-checked a few times a second.

The count changes on the thread that runs the ops (OpenMP's thread count is per calling thread), once a
step at most, from :func:`on_step`.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from pathlib import Path

import torch

#: Seconds between two looks at how busy the machine is.
INTERVAL_S = 0.5
#: Ticks per second of /proc/stat.
_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # user nice system irq softirq steal (iowait and idle are not busy)


def busy_seconds(cpus: set[int], stat: Path = Path("/proc/stat")) -> float:
    """CPU seconds spent busy so far on ``cpus``, by every process of the machine."""
    ticks = 0
    for line in stat.read_text().splitlines():
        name, _, rest = line.partition(" ")
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
            fields = rest.split()
            ticks += sum(int(fields[i]) for i in _BUSY_FIELDS if i < len(fields))
    return ticks / _CLK_TCK


def own_seconds() -> float:
    """CPU seconds this process (all its threads) has used so far."""
    times = os.times()
    return times.user + times.system


class ThreadBudget:
    """Chooses the torch thread count from the CPUs nobody else keeps busy (see the module docstring)."""

    def __init__(self, limit: int, cpus: set[int], interval_s: float = INTERVAL_S,
                 busy: Callable[[], float] | None = None, own: Callable[[], float] = own_seconds,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.interval_s = interval_s
        self._busy = busy or (lambda: busy_seconds(cpus))
        self._own = own
        self._clock = clock
        self._last = (clock(), self._busy(), own())
        self.threads = limit

    def wanted(self) -> int:
        """Threads for the CPUs left over by other processes since the last look (1 to ``limit``)."""
        now, busy, own = self._clock(), self._busy(), self._own()
        last_now, last_busy, last_own = self._last
        self._last = (now, busy, own)
        elapsed = now - last_now
        if elapsed <= 0:
            return self.threads
        others = max(0.0, (busy - last_busy) - (own - last_own)) / elapsed
        return max(1, min(self.limit, math.floor(self.limit - others + 0.5)))

    def on_step(self) -> None:
        """Re-check at most every ``interval_s`` and set torch's thread count (call on the op thread)."""
        if self._clock() - self._last[0] < self.interval_s:
            return
        threads = self.wanted()
        if threads != self.threads:
            self.threads = threads
            torch.set_num_threads(threads)


_budget: ThreadBudget | None = None


def start(limit: int) -> None:
    """Size torch's threads to the machine from now on, at most ``limit`` (when the user chose no count)."""
    global _budget
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))
    torch.set_num_threads(limit)
    _budget = ThreadBudget(limit, set(cpus))


def on_step() -> None:
    """Once per step, on the thread that runs the ops: adjust the thread count when the budget says so."""
    if _budget is not None:
        _budget.on_step()
