"""Compiled grammars are bounded in memory (entries and bytes) and never written to disk."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from infercore.config import StructuredOutputsConfig
from infercore.sampling_params import StructuredOutputsParams
from infercore.structured_output import StructuredOutputManager
from infercore.structured_output.cache import LRUCache


def wide_schema(i: int) -> dict:
    """A schema whose xgrammar compile holds tens of kB of token-mask tables on the test vocabulary."""
    return {"type": "object", "properties": {f"f{i}_{j}": {"type": "string"} for j in range(50)}}


def test_lru_cache_drops_the_oldest_past_its_bytes() -> None:
    cache: LRUCache[str] = LRUCache(capacity=10, max_bytes=10, size_of=len)
    for key in "abc":
        cache.put(("regex", key), key * 4)
    assert cache.get(("regex", "a")) is None and len(cache) == 2 and cache.num_bytes == 8
    cache.put(("regex", "b"), "b")  # replacing a value re-counts its bytes
    assert cache.num_bytes == 5
    cache.put(("regex", "huge"), "x" * 11)  # larger than the whole bound: not kept
    assert cache.get(("regex", "huge")) is None and cache.num_bytes == 5


def test_grammar_cache_is_bounded_in_bytes(tokenizer, vocab_size: int) -> None:
    config = StructuredOutputsConfig(structured_outputs_backend="xgrammar", grammar_cache_size=1000)
    probe = StructuredOutputManager(config, tokenizer, vocab_size)
    one = probe.backend.compile(StructuredOutputsParams(json=wide_schema(0))).memory_bytes()
    probe.shutdown()
    assert one > 1000, "xgrammar reports the size of its compiled grammars"
    limit = 5 * one
    manager = StructuredOutputManager(config, tokenizer, vocab_size, cache_bytes=limit)
    try:
        for i in range(24):
            manager.submit(f"r{i}", StructuredOutputsParams(json=wide_schema(i)))
            assert manager.grammar_bitmask([f"r{i}"]) is not None
            manager.remove(f"r{i}")
            assert manager.cache.num_bytes <= limit
        assert 0 < len(manager.cache) < 24 and manager.cache.num_bytes > limit // 2
    finally:
        manager.shutdown()


@pytest.mark.parametrize("backend", ["xgrammar", "guidance"])
def test_grammar_compiles_write_nothing_to_disk(backend: str, tokenizer, vocab_size: int, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HOME", "XDG_CACHE_HOME", "TMPDIR"):
        (tmp_path / name).mkdir()
        monkeypatch.setenv(name, str(tmp_path / name))
    monkeypatch.setattr(tempfile, "tempdir", None)
    monkeypatch.chdir(tmp_path)
    config = StructuredOutputsConfig(structured_outputs_backend=backend, grammar_cache_size=4)
    manager = StructuredOutputManager(config, tokenizer, vocab_size)
    try:
        constraints = [StructuredOutputsParams(json=wide_schema(i)) for i in range(6)]
        for i in range(1, 4):
            constraints += [StructuredOutputsParams(regex=f"[a-z]{{{i}}}"), StructuredOutputsParams(choice=[str(i)])]
        for i, params in enumerate(constraints):
            manager.submit(f"r{i}", params)
            assert manager.grammar_bitmask([f"r{i}"]) is not None
            manager.remove(f"r{i}")
    finally:
        manager.shutdown()
    written = [str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()]
    assert written == [], f"grammar compiles wrote {written}"
    assert sorted(os.listdir(tmp_path)) == ["HOME", "TMPDIR", "XDG_CACHE_HOME"]
