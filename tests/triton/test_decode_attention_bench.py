"""The decode-attention benchmark's ragged batches on the host (Triton's interpreter, tiny shapes): both
cache dtypes run, every timed setting computes the one-split answer, and the sweep's ragged timer works."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "decode_attention.py"
_SPEC = importlib.util.spec_from_file_location("decode_attention_benchmark", _PATH)
bench = importlib.util.module_from_spec(_SPEC)
sys.modules[_SPEC.name] = bench
_SPEC.loader.exec_module(bench)


@pytest.fixture
def on_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tensors on the CPU, each timing one call, two settings besides the engine's."""
    monkeypatch.setattr(bench, "DEVICE", "cpu")
    monkeypatch.setattr(bench, "RAGGED_SETTINGS", ((32,), (4,), (2, 3)))

    def once(fn) -> float:  # noqa: ANN001
        fn()
        return 1.0

    monkeypatch.setattr(bench, "_median_us", once)


def _args(kv_cache_dtype: str) -> argparse.Namespace:
    return argparse.Namespace(batch=3, heads=4, kv_heads=2, head_size=16, block_size=16, kv_cache_dtype=kv_cache_dtype,
                              ragged="20:70:96", layout="slot-major")


@pytest.mark.parametrize("kv_cache_dtype", ["bfloat16", "fp8"])
def test_ragged_mode_times_every_case_and_each_matches_one_split(
        on_host: None, kv_cache_dtype: str, capsys: pytest.CaptureFixture[str]) -> None:
    bench.ragged(_args(kv_cache_dtype))
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    # Splits 1, 2 and 4 and two other settings in random order; the settings again longest first.
    assert [(r["order"], r["num_splits"]) for r in records] == [
        ("random", 1), ("random", 2), ("random", 4), ("random", 1), ("random", 1),
        ("longest_first", 1), ("longest_first", 1), ("longest_first", 1)]
    assert all(r["kv_cache_dtype"] == kv_cache_dtype for r in records)
    # The same cache and queries through other splits and tiles: the same attention, to bf16 rounding.
    assert max(r["rel_err_vs_one_split"] for r in records) < 2e-2
    assert all(r["TBps"] > 0 for r in records)


def test_the_sweep_times_a_setting_on_a_ragged_batch(on_host: None) -> None:
    timer = bench._ragged_timer(_args("fp8"), (20, 70), 96)
    assert timer(bench.choose_decode_config(3, True)) == 1.0
    assert timer(bench.DecodeConfig(block_n=32, num_warps=4, num_stages=2)) == 1.0


@pytest.mark.parametrize("kv_cache_dtype", ["bfloat16", "fp8"])
def test_split_sweep_times_both_tiles_at_every_split_and_the_engines_choice(
        on_host: None, kv_cache_dtype: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(bench, "SPLIT_COUNTS", (1, 2))
    args = argparse.Namespace(**{**vars(_args(kv_cache_dtype)), "split_sweep": "1,3"})
    bench.split_sweep(args)
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["batch"] for r in records] == [1, 3]
    for r in records:
        engine = r["engine"]
        # Both tiles at each listed split count, and the engine's own choice, all computing the same attention.
        assert {"64x1", "64x2", "128x1", "128x2", f"{engine['block_n']}x{engine['splits']}"} == set(r["us"])
        assert r["max_rel_err_vs_one_split"] < 2e-2
        assert r["engine_over_best"] >= 1.0 and r["kv_cache_dtype"] == kv_cache_dtype
