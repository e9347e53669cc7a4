"""Building a start-up pass's Triton kernels side by side before the pass runs.

Triton compiles a kernel the first time it is launched with a new specialisation. Start-up launches tens of
new ones, one after another (profiling, warm-up, graph capture), so on a machine whose caches are empty their
builds add up: about 15 s of the 8B shape's start-up on an H100. Inside :func:`build_ahead`, every Triton
launch compiles instead of running: the build goes to a pool of threads (Triton's ``AsyncCompileMode``) and the
pass moves on at once, its outputs left unwritten. Leaving the block waits for the builds. Run for real
afterwards, the same pass finds every kernel it launches already built. Builds on threads do run side by side:
four sm_90 builds of the verification kernel took 3.6 s on two threads against 7.0 s on one (Triton 3.9, two
CPU cores).

A pass run this way computes nothing, so it must not decide anything from its outputs; a failure inside it only
leaves the remaining kernels to be built when first run. GPU platforms offer it through
:meth:`~infercore.platforms.interface.Platform.kernel_builds_ahead` where :data:`BUILD_AHEAD_ENV` asks for it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

#: ``INFERCORE_KERNEL_BUILDS_AHEAD=1`` turns building ahead on (off by default until measured on every platform).
BUILD_AHEAD_ENV = "INFERCORE_KERNEL_BUILDS_AHEAD"
#: Threads that build at once, at most.
MAX_WORKERS = 32


def requested() -> bool:
    """Whether the environment asks for building ahead."""
    return os.environ.get(BUILD_AHEAD_ENV, "0").strip() == "1"


def _async_compile_mode() -> Any:
    """Triton's ``AsyncCompileMode`` class, or None on a release without it."""
    try:
        import triton
    except ImportError:
        return None
    return getattr(triton, "AsyncCompileMode", None)


def supported() -> bool:
    """Whether the installed Triton can build in the background."""
    return _async_compile_mode() is not None


@contextmanager
def build_ahead(workers: int | None = None) -> Iterator[None]:
    """Inside the block, Triton launches build their kernels on ``workers`` threads (default: one per CPU, at
    most :data:`MAX_WORKERS`) instead of running; the block's end waits for every build."""
    from triton.runtime.jit import JITFunction

    mode_cls = _async_compile_mode()
    if mode_cls is None:
        raise RuntimeError("this Triton release cannot build kernels in the background (no AsyncCompileMode)")
    launch = JITFunction.run

    def build_only(self: Any, *args: Any, grid: Any, warmup: bool = False, **kwargs: Any) -> Any:
        return launch(self, *args, grid=grid, warmup=True, **kwargs)

    pool = ThreadPoolExecutor(max_workers=workers or min(MAX_WORKERS, os.cpu_count() or 1),
                              thread_name_prefix="infercore-kernel-build")
    try:
        mode = mode_cls(pool, ignore_errors=True)
    except TypeError:  # a release whose mode raises every failed build
        mode = mode_cls(pool)
    JITFunction.run = build_only  # type: ignore[method-assign]
    try:
        with mode:
            yield
    finally:
        JITFunction.run = launch  # type: ignore[method-assign]
        pool.shutdown(wait=True)
