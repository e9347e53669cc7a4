"""Launch settings of the FP8 block GEMM: the default for large batches, and a sweep's table read through
``INFERCORE_FP8_BLOCK_TABLE``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infercore_triton import fp8_block_configs as configs
from infercore_triton.fp8_block_configs import BlockGemmConfig


@pytest.fixture
def table_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    def use(path: Path | None) -> None:
        if path is None:
            monkeypatch.delenv(configs.TABLE_ENV, raising=False)
        else:
            monkeypatch.setenv(configs.TABLE_ENV, str(path))
        configs.reload_table()

    yield use
    configs.reload_table()


def test_large_batches_take_128_row_tiles_over_8_warps() -> None:
    # 256 rows of the 8B shape's gate/up projection: 2 x 192 tiles of 128 x 128 fill 132 SMs.
    assert configs.default_config(256, 24576, 4096, 128, 128, 132) == BlockGemmConfig(128, 128, 1, 8, 4)
    # 128 rows of a 4096-row weight would leave SMs idle with such tiles: narrower ones instead.
    small = configs.default_config(128, 4096, 4096, 128, 128, 132)
    assert small.block_m == 64 and small.num_warps == 4


def test_a_sweep_table_overrides_the_measured_one(table_env, tmp_path: Path) -> None:
    mine = BlockGemmConfig(block_m=128, tile_n=64, split_k=1, num_warps=8, num_stages=5)
    path = tmp_path / "table.json"
    configs.write_table(path, {(512, 6144, 4096): mine, (16, 6144, 4096): BlockGemmConfig(16, 64, 2)},
                        device="test")
    assert json.loads(path.read_text())["device"] == "test"
    table_env(path)
    assert configs.config_for(300, 6144, 4096, 128, 128) == mine
    assert configs.config_for(1, 6144, 4096, 128, 128) == BlockGemmConfig(16, 64, 2)
    # Tiles wider than the weight's scale blocks do not fit: the default, not an error.
    assert configs.config_for(300, 6144, 4096, 32, 32) == configs.default_config(300, 6144, 4096, 32, 32)
    table_env(None)
    assert configs.config_for(1, 6144, 4096, 128, 128) == configs.TUNED[(16, 6144, 4096)]


def test_an_unreadable_table_is_ignored(table_env, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "something else", "entries": []}))
    table_env(bad)
    assert configs.config_for(1, 6144, 4096, 128, 128) == configs.TUNED[(16, 6144, 4096)]
    assert "ignoring" in caplog.text
    table_env(tmp_path / "missing.json")
    assert configs.load_table() == {}


def _benchmark_module():  # noqa: ANN202 - benchmarks/fp8_gemm.py, which is no package
    import importlib.util
    import sys

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "fp8_gemm.py"
    spec = importlib.util.spec_from_file_location("fp8_gemm_benchmark", path)
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench
    spec.loader.exec_module(bench)
    return bench


def test_the_cublas_threshold_is_where_cublas_wins_from_then_on() -> None:
    bench = _benchmark_module()

    def lines(cublas_by_m: dict[int, float | None]) -> list[dict[str, object]]:
        return [{"m": m, "shape": shape, "fp8_gemm_us": 10.0, "fp8_cublas_us": us}
                for m, us in cublas_by_m.items() for shape in ("qkv", "down")]

    # Wins at 4 rows but not at 16: only the run of wins up to the largest count counts.
    assert bench.cublas_min_m(lines({1: None, 4: 9.0, 16: 11.0, 64: 9.5, 256: 6.0})) == 64
    assert bench.cublas_min_m(lines({64: 9.0, 256: 10.0})) is None  # loses at the largest: never
    assert bench.cublas_min_m(lines({64: None, 256: None})) is None  # the probe refused: nothing measured


def test_the_sweep_candidates_fit_128_blocks_and_compile_once_each() -> None:
    bench = _benchmark_module()
    buckets = bench._buckets(bench.ROWS)
    assert buckets == {16: 16, 32: 32, 64: 64, 128: 128, 256: 256, 512: 512}
    for bucket in buckets:
        cands = bench.candidates(bucket)
        assert cands and all(128 % c.tile_n == 0 and c.block_m <= max(64, bucket) for c in cands)
    # Large batches try 128-row tiles over 8 warps with up to 5 stages.
    assert BlockGemmConfig(128, 128, 1, 8, 5) in bench.candidates(256)
    jobs = bench._compile_jobs(list(bench.ROWS))
    keys = {(c.block_m, c.tile_n, c.split_k > 1, c.num_warps, c.num_stages) for *_, c in jobs}
    assert len(keys) == len(jobs) < 80
