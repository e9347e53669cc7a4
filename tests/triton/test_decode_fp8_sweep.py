"""The fp8 decode launch table: read through INFERCORE_DECODE_FP8_TABLE by the backend's choices (a bad or absent
table keeps the built-in setting), and written by benchmarks/decode_fp8_sweep.py, run here on the host (Triton's
interpreter, tiny shapes, every timing one call)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import pytest
import triton_interpreter
from triton.runtime import interpreter

from infercore_triton import decode_fp8_table
from infercore_triton.backend import (
    _FP8_TILE,
    FP8_PROGRAMS_PER_SM,
    choose_decode_config,
    choose_num_splits,
)
from infercore_triton.decode_attention import DecodeConfig
from infercore_triton.decode_fp8_table import (
    REMOVED_FIELDS,
    TABLE_ENV,
    Fp8DecodeTable,
    load_table,
    parse_table,
)

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def table_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):  # noqa: ANN201
    """Writes a table (or raw text) and points the environment at it; the reader's cache cleared around."""
    decode_fp8_table._load.cache_clear()

    def write(content: dict | str) -> Path:
        path = tmp_path / "table.json"
        path.write_text(content if isinstance(content, str) else json.dumps(content))
        monkeypatch.setenv(TABLE_ENV, str(path))
        decode_fp8_table._load.cache_clear()
        return path

    yield write
    decode_fp8_table._load.cache_clear()


def test_the_backend_follows_the_table(table_env) -> None:  # noqa: ANN001
    config = DecodeConfig(block_n=256, num_warps=8, num_stages=2, fp8_k_words=True)
    table_env(Fp8DecodeTable(config, programs_per_sm=8).to_json(measured={"speedup": 1.3}))
    assert load_table() == Fp8DecodeTable(config, 8)
    assert choose_decode_config(256, fp8_cache=True) == config
    assert choose_decode_config(256, fp8_cache=False) != config  # a bf16 cache never reads it
    # Split counts over an fp8 cache aim for the table's programs per multiprocessor.
    # (64 sequences x 8 KV heads on 132 multiprocessors: 3 splits at 8 per multiprocessor, 1 at the default 2.)
    assert choose_num_splits(64, 8, 4096, 132, fp8_cache=True) == 3
    assert choose_num_splits(64, 8, 4096, 132, True, FP8_PROGRAMS_PER_SM) == 1
    assert choose_num_splits(64, 8, 4096, 132, fp8_cache=False) == choose_num_splits(64, 8, 4096, 132) == 4


@pytest.mark.parametrize("content", ["{not json", {"format": "another/1", "config": {}},
                                     {"format": decode_fp8_table.TABLE_FORMAT, "config": {"blocks": 3}},
                                     {"format": decode_fp8_table.TABLE_FORMAT, "config": {}, "programs_per_sm": 0}])
def test_a_bad_table_keeps_the_built_in_setting(table_env, content: dict | str) -> None:  # noqa: ANN001
    table_env(content)
    assert load_table() is None
    assert choose_decode_config(256, fp8_cache=True) == _FP8_TILE
    assert choose_num_splits(64, 8, 4096, 132, fp8_cache=True) == 1


def test_no_table_keeps_the_built_in_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TABLE_ENV, raising=False)
    assert load_table() is None and choose_decode_config(1, fp8_cache=True) == _FP8_TILE


def test_parse_table_reads_what_to_json_writes() -> None:
    table = Fp8DecodeTable(dataclasses.replace(_FP8_TILE, fp8_k_words=True), None)
    assert parse_table(json.loads(json.dumps(table.to_json()))) == table


@pytest.mark.parametrize("on", [(), ("fp8_qk_dot",), ("fp8_qk_dot", "fp8_v_words"), ("fp8_qk_dot", "fp8_pv_dot")])
def test_a_table_naming_removed_variants_still_loads(table_env, caplog: pytest.LogCaptureFixture,  # noqa: ANN001
                                                     on: tuple[str, ...]) -> None:
    """Tables written before Q·K/P·V on the FP8 tensor cores and V as words were removed carry those fields: they
    are dropped (a warning names the ones that were on) and the rest of the table applies."""
    config = DecodeConfig(block_n=64, num_warps=4, num_stages=2)
    written = Fp8DecodeTable(config, programs_per_sm=4).to_json()
    written["config"].update({name: name in on for name in REMOVED_FIELDS})
    table_env(written)
    with caplog.at_level("WARNING", logger=decode_fp8_table.__name__):
        assert load_table() == Fp8DecodeTable(config, 4)
    assert choose_decode_config(256, fp8_cache=True) == config
    warned = [r.getMessage() for r in caplog.records if r.name == decode_fp8_table.__name__]
    assert all(name in " ".join(warned) for name in on) and bool(warned) == bool(on)


@pytest.fixture
def sweep_module(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    """benchmarks/decode_fp8_sweep.py with its tensors on the host, tiny ragged batches, one call per timing."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    for name in ("decode_attention", "decode_fp8_sweep"):
        sys.modules.pop(name, None)
    import decode_attention as bench
    import decode_fp8_sweep as sweep

    monkeypatch.setattr(bench, "DEVICE", "cpu")
    # The interpreter's own float32 -> e4m3 rounding can halve a value (tests/triton_interpreter.py): the GPU's.
    monkeypatch.setattr(interpreter.InterpreterBuilder, "create_fp_to_fp",
                        triton_interpreter.fp8_rounds_to_nearest_even)

    def once(fn) -> float:  # noqa: ANN001
        fn()
        return 1.0

    monkeypatch.setattr(bench, "_median_us", once)
    monkeypatch.setattr(sweep, "RAGGED_LENGTHS", (20, 70))
    monkeypatch.setattr(sweep, "RAGGED_WIDTH", 96)
    monkeypatch.setattr(sweep, "PER_SM_BATCHES", (2, 3))
    yield sweep
    for name in ("decode_attention", "decode_fp8_sweep"):
        sys.modules.pop(name, None)


def test_the_sweep_times_each_setting_and_writes_a_table_the_backend_reads(
        sweep_module, table_env, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: ANN001
    path = tmp_path / "written.json"
    args = argparse.Namespace(settings=["64:4:3", "64:4:2:k", "64:4:3:q"], programs_per_sm=[2, 4],
                              write_table=str(path), budget_s=None, batch=3, context=64, heads=4, kv_heads=2, head_size=32,
                              block_size=16)
    choice = sweep_module.sweep(args)
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    sweeps = [r for r in records if r["benchmark"] == "decode_attention_fp8_sweep"]
    assert [r["setting"] for r in sweeps] == ["128:4:3", "64:4:3", "64:4:2:k", "64:4:3:q"]
    assert sweeps[0]["baseline"] and sweeps[0]["rel_diff_uniform"] == 0.0
    assert "error" in sweeps[3]  # a letter of a removed variant (Q·K in e4m3): reported, never chosen
    for r in sweeps[1:3]:  # the same attention over other tiles
        assert r["ok"] and r["rel_diff_uniform"] < 1e-2 and r["rel_diff_ragged"] < 1e-2, r
        assert r["uniform"]["fraction_of_4.3TBps"] > 0 and r["ragged"]["TBps"] > 0
    per_sm = [r for r in records if r["benchmark"] == "decode_attention_fp8_programs_per_sm"]
    assert [r["programs_per_sm"] for r in per_sm] == [2, 4]
    assert records[-1] == choice and choice["benchmark"] == "decode_attention_fp8_choice"
    assert choice["baseline"]["setting"] == "128:4:3" and choice["table"] == str(path)
    # Every timing here is 1.0: the first of the equals wins.
    assert choice["setting"] == "128:4:3" and choice["programs_per_sm"] == 2
    table_env(json.loads(path.read_text()))
    assert choose_decode_config(8, fp8_cache=True) == _FP8_TILE and load_table().programs_per_sm == 2


def test_past_its_budget_the_sweep_keeps_the_baseline(sweep_module, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: ANN001
    args = argparse.Namespace(settings=["64:4:3"], programs_per_sm=[4], write_table=None, budget_s=1e-9, batch=2,
                              context=32, heads=2, kv_heads=1, head_size=32, block_size=16)
    choice = sweep_module.sweep(args)
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [("skipped" in r, r["setting"]) for r in records[:2]] == [(False, "128:4:3"), (True, "64:4:3")]
    assert choice["setting"] == "128:4:3" and choice["programs_per_sm"] == 2 and "table" not in choice
