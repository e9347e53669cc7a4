"""Where start-up time goes: named phases, each logged at INFO as it ends, and one summary line.

Each process keeps its own timeline (the engine process, each worker, the API server). A phase is a
``with startup_phase("weights"):`` block; phases may nest (a nested one is logged with its parent's
name in front). ``log_summary`` writes the phases in order, the seconds before the first one (imports
and whatever the program did before start-up began), the total since the process started, and the
Triton kernels built meanwhile where Triton is in use.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger("infercore.startup")


def process_age_s() -> float:
    """Seconds since this process started (from /proc; 0.0 where that can't be read)."""
    try:
        with open(f"/proc/{os.getpid()}/stat") as stat:
            start_ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as uptime:
            return max(0.0, float(uptime.read().split()[0]) - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


@dataclass
class StartupTimeline:
    """The phases of this process's start-up, in the order they ended."""

    phases: list[tuple[str, float]] = field(default_factory=list)
    #: Seconds of the process's life before the first phase began (imports, mostly).
    before_s: float | None = None
    _stack: list[str] = field(default_factory=list)
    _kernel_builds: int = 0

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the block as phase ``name`` and log it when it ends."""
        if self.before_s is None:
            self.before_s = process_age_s()
        full = "/".join([*self._stack, name])
        # Builds are counted per top-level phase (a counter inside another would hide builds from it).
        builds = _KernelBuilds(enabled=not self._stack)
        self._stack.append(name)
        start = time.perf_counter()
        try:
            with builds:
                yield
        finally:
            seconds = time.perf_counter() - start
            self._stack.pop()
            self.phases.append((full, seconds))
            self._kernel_builds += builds.count
            extra = f" ({builds.count} kernel builds: {builds.names()})" if builds.count else ""
            logger.info("start-up: %s took %.2f s%s", full, seconds, extra)

    def summary(self, what: str) -> str:
        """One line: the top-level phases in order, what came before them, the total."""
        top = [(name, s) for name, s in self.phases if "/" not in name]
        parts = [f"before start-up (imports) {self.before_s or 0.0:.2f} s"] + [f"{n} {s:.2f} s" for n, s in top]
        builds = f", {self._kernel_builds} kernel builds" if self._kernel_builds else ""
        return f"start-up timeline of {what}: " + " | ".join(parts) + f"; {process_age_s():.2f} s since the process started{builds}"

    def log_summary(self, what: str) -> None:
        logger.info("%s", self.summary(what))


class _KernelBuilds:
    """Counts the Triton kernel variants built inside it (nothing where Triton is not loaded)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        #: Variants built, per kernel name.
        self.builds: dict[str, int] = {}
        self._counter: Any = None

    def __enter__(self) -> _KernelBuilds:
        if self.enabled and "triton" in sys.modules:  # never import Triton just to count: a CPU start-up needs none of it
            from infercore.jit_builds import JitBuildCounter

            self._counter = JitBuildCounter().__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._counter is not None:
            self._counter.__exit__(None, None, None)
            self.builds = dict(self._counter.builds)

    @property
    def count(self) -> int:
        return sum(self.builds.values())

    def names(self) -> str:
        """The kernels built, most variants first: ``"_decode_split_kernel×4, rms_norm×2"``."""
        ranked = sorted(self.builds.items(), key=lambda item: (-item[1], item[0]))
        return ", ".join(f"{name}×{count}" if count > 1 else name for name, count in ranked)


#: This process's timeline.
TIMELINE = StartupTimeline()


def startup_phase(name: str) -> contextlib.AbstractContextManager[None]:
    """``with startup_phase("weights"): ...`` times a phase of this process's start-up."""
    return TIMELINE.phase(name)
