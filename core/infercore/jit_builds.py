"""Counting the Triton kernel variants built while a benchmark runs.

A variant built inside a timed region costs seconds of compiling (or a disk-cache load) that the
workload itself never asked for; the throughput benchmark reports these so a run that paid for
them can be told apart from one that did not.
"""

from __future__ import annotations

from collections import Counter
from types import TracebackType
from typing import Any


class JitBuildCounter:
    """Context manager: counts, per kernel name, the Triton variants built inside it.

    A variant counts once however often it is asked for: while kernels build ahead (in the background), every
    launch of a variant not yet built asks again. Does nothing (and counts nothing) where Triton or its runtime
    hooks are missing.
    """

    def __init__(self) -> None:
        self.builds: Counter[str] = Counter()
        self._seen: set[tuple[str, str, str]] = set()
        self._knobs: Any = None
        self._previous: Any = None

    def _hook(self, *, fn: Any, key: Any = None, **kwargs: Any) -> bool:
        name = getattr(fn, "name", str(fn))
        variant = (name, repr(key), repr(kwargs.get("compile", {}).get("device")))
        if key is None or variant not in self._seen:
            self._seen.add(variant)
            self.builds[name] += 1
        return False  # go on and build it

    def __enter__(self) -> JitBuildCounter:
        try:
            from triton import knobs
        except ImportError:
            return self
        runtime = getattr(knobs, "runtime", None)
        if runtime is None or not hasattr(runtime, "jit_cache_hook"):
            return self
        self._knobs, self._previous = runtime, runtime.jit_cache_hook
        runtime.jit_cache_hook = self._hook
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._knobs is not None:
            self._knobs.jit_cache_hook = self._previous
            self._knobs = None
