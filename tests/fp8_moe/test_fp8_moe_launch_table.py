"""Launch settings of the FP8 fused-MoE kernels: the default by batch size, a sweep's table read through
``INFERCORE_FP8_MOE_TABLE``, and other settings giving the same numbers (Triton's interpreter)."""

from __future__ import annotations

import pytest
import torch
from test_fp8_moe_ops import DEVICE, _fp8_case

from infercore.ops.moe_fp8_reference import fused_moe_fp8_block
from infercore_triton import fused_moe_fp8_configs as configs
from infercore_triton.fused_moe_fp8 import fp8_fused_experts
from infercore_triton.fused_moe_fp8_configs import GemmLaunch, MoeFp8Config


def test_decode_batches_take_small_row_blocks() -> None:
    assert configs.default_config(8, 8, 128, 1536, 2048) == MoeFp8Config(16, GemmLaunch(64), GemmLaunch(64))
    assert configs.default_config(4096, 8, 128, 1536, 2048) == MoeFp8Config(64, GemmLaunch(128), GemmLaunch(128))


def test_a_written_table_replaces_the_default_for_its_bucket(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    tuned = MoeFp8Config(32, GemmLaunch(128, 8, 4), GemmLaunch(32, 4, 3))
    path = tmp_path / "moe.json"
    configs.write_table(path, {configs.table_key(50, 8, 128, 1536, 2048): tuned})
    monkeypatch.setenv(configs.TABLE_ENV, str(path))
    configs.load_table.cache_clear()
    try:
        assert configs.config_for(64, 8, 128, 1536, 2048) == tuned  # 50 and 64 share the bucket of 64
        assert configs.config_for(65, 8, 128, 1536, 2048) == configs.default_config(65, 8, 128, 1536, 2048)
        path.write_text('{"format": "something else"}')
        configs.load_table.cache_clear()
        assert configs.load_table() == {}
    finally:
        configs.load_table.cache_clear()


@pytest.mark.parametrize("config", [MoeFp8Config(32, GemmLaunch(32), GemmLaunch(16, 2, 2)),
                                    MoeFp8Config(16, GemmLaunch(128), GemmLaunch(64))])
def test_other_launch_settings_give_the_reference(config: MoeFp8Config) -> None:
    case = [t.to(DEVICE) for t in _fp8_case(10, 64, 48, 4, 2, 32, seed=5)]
    ours = fp8_fused_experts(*case, 32, 32, config=config)
    ref = fused_moe_fp8_block(*case, 32, 32)
    assert float((ours - ref).abs().max() / ref.abs().max()) < 1e-4
    assert torch.isfinite(ours).all()
