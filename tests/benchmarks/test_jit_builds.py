"""JitBuildCounter: counts Triton variant builds inside it and leaves Triton's hook as it found it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from infercore.jit_builds import JitBuildCounter

knobs = pytest.importorskip("triton.knobs", reason="Triton is not installed")


def test_counts_builds_by_kernel_and_restores_the_previous_hook() -> None:
    def previous(**_):
        return False

    knobs.runtime.jit_cache_hook = previous
    try:
        with JitBuildCounter() as counter:
            hook = knobs.runtime.jit_cache_hook
            assert hook is not previous
            # Triton calls the hook with keyword arguments, ``fn`` naming the kernel; False lets the build go on.
            assert hook(fn=SimpleNamespace(name="_decode_split_kernel"), key=None) is False
            assert hook(fn=SimpleNamespace(name="_decode_split_kernel"), key=None) is False
            assert hook(fn=SimpleNamespace(name="_prefill_kernel"), key=None) is False
        assert knobs.runtime.jit_cache_hook is previous
        assert dict(counter.builds) == {"_decode_split_kernel": 2, "_prefill_kernel": 1}
    finally:
        knobs.runtime.jit_cache_hook = None


def test_a_variant_asked_for_again_counts_once() -> None:
    """While kernels build ahead, every launch of a variant not yet built calls the hook again with its key."""
    knobs.runtime.jit_cache_hook = None
    try:
        with JitBuildCounter() as counter:
            hook = knobs.runtime.jit_cache_hook
            split = SimpleNamespace(name="_decode_split_kernel")
            for key in ("splits=4", "splits=4", "splits=8", "splits=4"):
                assert hook(fn=split, key=key, compile={"device": 0}) is False
            assert hook(fn=split, key="splits=4", compile={"device": 1}) is False  # another device builds its own
        assert dict(counter.builds) == {"_decode_split_kernel": 3}
    finally:
        knobs.runtime.jit_cache_hook = None


def test_restores_the_hook_when_the_body_raises() -> None:
    knobs.runtime.jit_cache_hook = None
    with pytest.raises(RuntimeError), JitBuildCounter():
        raise RuntimeError("boom")
    assert knobs.runtime.jit_cache_hook is None
