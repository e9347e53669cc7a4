"""The CPUs this process may use: its affinity mask, lowered to its cgroup's CPU quota.

``os.cpu_count()`` (and torch's default thread count) ignore both: a container limited to 4 CPUs on a
64-core host would otherwise plan for 64.
"""

from __future__ import annotations

import math
import os
from pathlib import Path


def available_cpus() -> int:
    """CPUs this process may run on: its affinity mask, lowered to its cgroup's CPU quota (at least 1)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    quota = cgroup_cpu_quota()
    if quota is not None:
        cpus = min(cpus, max(1, math.floor(quota)))
    return max(1, cpus)


def cgroup_cpu_quota(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The cgroup's CPU quota in CPUs (cgroup v2 ``cpu.max`` or v1 ``cpu.cfs_quota_us``), None if unlimited."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota_us / period_us if quota_us > 0 and period_us > 0 else None
