"""Building a start-up pass's Triton kernels side by side before the pass runs.

Triton compiles a kernel the first time it is launched with a new specialisation. Start-up launches tens of
new ones, one after another (profiling, warm-up, graph capture), so on a machine whose caches are empty their
builds add up: about 15 s of the 8B shape's start-up on an H100. Inside :func:`build_ahead`, every Triton
launch compiles instead of running: the build goes to a pool of threads (Triton's ``AsyncCompileMode``) and the
pass moves on at once, its outputs left unwritten. Leaving the block waits for the builds. Run for real
afterwards, the same pass finds every kernel it launches already built. Builds on threads do run side by side:
four sm_90 builds of the verification kernel took 3.6 s on two threads against 7.0 s on one (Triton 3.9, two
CPU cores).

A pass run this way computes nothing, so it must not decide anything from its outputs, nor index with them: an
index a skipped kernel left unwritten can be anything, and a device-side bounds assert (torch's checked
``index_put_``, ``gather``) poisons the device context for good. Code that indexes with a kernel's output asks
:func:`building_ahead` first. Any other failure inside the pass only leaves the remaining kernels to be built when
first run. GPU platforms offer it through
:meth:`~infercore.platforms.interface.Platform.kernel_builds_ahead` unless :data:`BUILD_AHEAD_ENV` says ``0``.

Where the kernels are already in Triton's cache the ahead run is pure cost (the passes run twice: about 1.5 s of
the 8B shape's warm start-up on an H100), so by default a start-up builds ahead only where no earlier start-up of
the same configuration did: each ahead run that completes leaves a marker named by the configuration's key
(:func:`built_before`, :func:`mark_built`) beside Triton's cache, and goes when that cache is cleared.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

#: ``INFERCORE_KERNEL_BUILDS_AHEAD``: ``1`` builds ahead at every start-up, ``0`` never; unset (or ``auto``) builds
#: ahead where this configuration's kernels were not built ahead before (:func:`built_before`).
BUILD_AHEAD_ENV = "INFERCORE_KERNEL_BUILDS_AHEAD"
#: The folder beside Triton's cache where completed ahead runs leave their markers.
MARKER_FOLDER = "infercore-builds-ahead"
#: Threads that build at once, at most.
MAX_WORKERS = 32
#: How many passes run ahead are open (:func:`ahead_pass`; nested where :func:`build_ahead` runs inside one).
_depth = 0


@contextmanager
def ahead_pass() -> Iterator[None]:
    """Mark the block as a pass run ahead: kernels launched inside it may leave their outputs unwritten. Start-up
    opens one around every platform's ``kernel_builds_ahead`` context, and :func:`build_ahead` opens its own."""
    global _depth
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1


def building_ahead() -> bool:
    """Whether this process is inside a pass run ahead (:func:`ahead_pass`): kernels' outputs are then unwritten
    memory, which nothing may index with (a device-side bounds assert cannot be recovered from)."""
    return _depth > 0


def requested() -> bool | None:
    """What the environment asks for: True (``1``: always build ahead), False (``0``: never) or None (unset or
    ``auto``: where :func:`built_before` says no)."""
    value = os.environ.get(BUILD_AHEAD_ENV, "auto").strip().lower()
    if value in ("", "auto"):
        return None
    return value == "1"


def _marker(key: str) -> Path | None:
    """The marker of ``key`` in Triton's cache folder (None without Triton)."""
    try:
        from triton import knobs
    except ImportError:
        return None
    folder = getattr(getattr(knobs, "cache", None), "dir", None)
    return Path(folder) / MARKER_FOLDER / key if folder else None


def built_before(key: str) -> bool:
    """Whether an ahead run of ``key`` (a start-up pass of one configuration) completed over this Triton cache."""
    marker = _marker(key)
    return marker is not None and marker.exists()


def mark_built(key: str) -> None:
    """Record that the ahead run of ``key`` completed (its kernels are in Triton's cache); best effort: a cache
    folder that cannot be written only means building ahead again next time."""
    marker = _marker(key)
    if marker is None:
        return
    with contextlib.suppress(OSError):
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()


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
        with mode, ahead_pass():
            yield
    finally:
        JITFunction.run = launch  # type: ignore[method-assign]
        pool.shutdown(wait=True)
