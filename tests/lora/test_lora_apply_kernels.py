"""The ``lora_apply`` Triton kernels (through Triton's interpreter without a GPU) give the torch reference's
results: the per-row (BGMV) paths of decode-sized steps (one fused launch, or shrink then expand) and the
grouped (SGMV) path of larger ones, mixed
adapters, tokens without one, ranks below the slot width, 1 to 3 output slices, the hidden dimension split
over programs; and the per-step metadata the runner builds once per step."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import triton
import triton_interpreter

from infercore.lora.step_state import LoRAStepState, group_by_slot, max_tiles, tile_rows
from infercore.ops import lora_reference

triton_interpreter.widen_bfloat16_dots()

from infercore_triton import lora_fused  # noqa: E402
from infercore_triton.lora import (  # noqa: E402
    BGMV_MAX_TOKENS,
    bgmv_settings,
    lora_apply,
    sgmv_settings,
)

#: The paths ``_check`` runs: per-row in one launch or two, grouped.
PATHS = ["fused", "bgmv", "sgmv"]

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
DECODE = [0, -1, 2, 0, 1]  # BGMV: at most BGMV_MAX_TOKENS tokens with the padding
PROMPT = [0, -1, 2, 0, 1, 1, -1, 2, 0, 0, 2, -1, 1, 0, 0, 0, 0, 0, 0, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]


def _state(slots: list[int], max_loras: int) -> tuple[LoRAStepState, int]:
    padded = len(slots) + 2  # two padding tokens, as a captured graph's size adds
    state = LoRAStepState(padded + 4, max_loras, DEVICE, pin=False)
    state.set_step(np.array(slots, dtype=np.int32), padded)
    return state, padded


def _force(monkeypatch: pytest.MonkeyPatch, path: str, settings: lora_fused.FusedSettings | None = None) -> None:
    """Make ``lora_apply``'s decode-sized steps run ``path``: "fused" (with ``settings``, else the default
    rule's) or "bgmv" (the two launches); "sgmv" steps are larger anyway."""
    from infercore_triton import lora

    def chosen(tokens: int, k: int, rank: int, width: int) -> lora_fused.FusedSettings | None:
        return (settings or lora_fused.default_settings(k, rank, width)) if path == "fused" else None

    monkeypatch.setattr(lora, "fused_settings", chosen)


def _check(slots: list[int], sizes: tuple[int, ...], hidden: int, dtype: torch.dtype, rank: int = 8,
           slot_width: int = 8) -> None:
    torch.manual_seed(0)
    max_loras = 3
    state, t = _state(slots, max_loras)
    step = state.step_for(t)
    assert step is not None
    x = torch.randn(t, hidden, dtype=dtype, device=DEVICE)
    a = torch.zeros(max_loras, len(sizes) * slot_width, hidden, dtype=dtype, device=DEVICE)
    for i in range(len(sizes)):  # each slice's A rank-padded with zero rows to the slot width
        a[:, i * slot_width: i * slot_width + rank] = torch.randn(max_loras, rank, hidden, device=DEVICE) * 0.2
    a[1, slot_width - 3: slot_width] = 0  # slot 1's first slice has a smaller rank still
    b = (torch.randn(max_loras, sum(sizes), slot_width, device=DEVICE) * 0.2).to(dtype)
    offsets = tuple(int(v) for v in np.cumsum((0, *sizes)))
    base = torch.randn(t, sum(sizes), dtype=dtype, device=DEVICE)
    out, ref = base.clone(), base.clone()
    assert lora_apply(out, x, a, b, *step, offsets) is out
    lora_reference.lora_apply(ref, x, a, b, *step, offsets)
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(out, ref, atol=tol, rtol=tol)
    untouched = [i for i, s in enumerate(slots) if s < 0] + [t - 2, t - 1]
    assert torch.equal(out[untouched], base[untouched]), "tokens without an adapter changed"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("sizes", [(48,), (32, 16, 24), (40, 40)])
@pytest.mark.parametrize("path", PATHS)
def test_lora_apply_matches_the_reference(path, sizes, dtype, monkeypatch):
    slots = PROMPT if path == "sgmv" else DECODE
    assert (len(slots) + 2 <= BGMV_MAX_TOKENS) == (path != "sgmv")
    _force(monkeypatch, path)
    _check(slots, sizes, hidden=40, dtype=dtype)


@pytest.mark.parametrize("path", PATHS)
def test_the_hidden_dimension_splits_over_programs(path, monkeypatch):
    hidden = 1100  # not a multiple of any block
    slots = PROMPT if path == "sgmv" else DECODE
    nr = 2 * 16
    if path == "bgmv":
        assert bgmv_settings(hidden, nr)[2] > 1
    elif path == "sgmv":
        t = len(slots) + 2
        assert sgmv_settings(max_tiles(t, 3), hidden, nr)[3] > 1
    # the fused kernel: several K iterations, output blocks narrower than a slice and across two slices
    for unroll in (False, True):
        _force(monkeypatch, path, lora_fused.FusedSettings(block_n=16, block_k=256, num_warps=4, unroll=unroll))
        _check(slots, (24, 24), hidden=hidden, dtype=torch.float32, rank=16, slot_width=16)


def test_tiles_group_each_slots_tokens():
    sorted_tokens, tiles = group_by_slot(np.array([2, -1, 0, 2, 2, 0, -1, 2]), max_loras=3, rows=2)
    assert sorted_tokens.tolist() == [2, 5, 0, 3, 4, 7]
    assert tiles.tolist() == [[0, 0, 2], [2, 2, 4], [2, 4, 6]]
    assert len(tiles) <= max_tiles(8, 3)
    assert tile_rows(1) == 16 and tile_rows(8192) == 64


def test_a_step_without_adapters_gives_the_layers_nothing_to_run():
    state, t = _state([-1, -1, -1], 2)
    assert state.step_for(t) is None
    state.set_step(np.array([-1, 1, -1], dtype=np.int32), t)
    step = state.step_for(t)
    assert step is not None and step is state.step_for(t), "the views are made once per token count"
    assert step.token_slots.tolist() == [-1, 1, -1, -1, -1]
    assert step.tiles[0].tolist() == [1, 0, 1] and (step.tiles[1:, 0] == -1).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_conformance_case_of_lora_apply_passes(dtype):
    from infercore.testing.checks import TOLERANCE
    from infercore.testing.op_cases import op_error

    assert op_error("lora_apply", lora_apply, DEVICE, dtype) <= TOLERANCE[dtype]


def test_decode_graphs_without_an_adapter_replay_the_capture_without_lora():
    from infercore.worker.lora_graphs import LoRAGraphs

    class Graphs:
        def __init__(self, name: str) -> None:
            self.name = name

        def padded_size(self, wanted: int) -> int:
            return 8

        def replay(self, size: int) -> str:
            return self.name

    state, t = _state([-1, 0], 2)
    graphs = LoRAGraphs(Graphs("with"), Graphs("without"), state)  # type: ignore[arg-type]
    assert graphs.replay(8) == "with" and graphs.padded_size(3) == 8
    state.set_step(np.array([-1, -1], dtype=np.int32), t)
    assert graphs.replay(8) == "without"


@pytest.mark.parametrize("path", PATHS)
def test_wide_slots_span_several_column_blocks(path, monkeypatch):
    # Three slices of rank 20 in slots 32 wide: 96 shrink columns, more than one block of them.
    _force(monkeypatch, path)
    _check(PROMPT if path == "sgmv" else DECODE, (24, 16, 16), hidden=72, dtype=torch.float32, rank=20,
           slot_width=32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rank", [8, 16, 64])
def test_the_fused_kernel_matches_the_reference_at_each_rank(rank, dtype, monkeypatch):
    # q/k/v of unequal widths; a block of 16 columns spans the narrow slices' boundaries
    _force(monkeypatch, "fused", lora_fused.FusedSettings(block_n=16, block_k=64, num_warps=4, unroll=rank == 16))
    _check(DECODE, (40, 8, 24), hidden=80, dtype=dtype, rank=rank, slot_width=rank)


def test_a_programmatic_dependent_launch_falls_back_where_unsupported(monkeypatch):
    # the interpreter (and a CPU or a GPU before sm_90) launches the fused kernel the ordinary way
    _force(monkeypatch, "fused", lora_fused.FusedSettings(block_n=32, block_k=64, num_warps=4, unroll=True, pdl=True))
    _check(DECODE, (32, 16, 16), hidden=64, dtype=torch.float32, rank=16, slot_width=16)


def test_the_shape_rule_fuses_small_decode_shrinks():
    from infercore_triton import lora

    assert lora.fused_settings is lora_fused.fused_settings
    for k, width in ((1024, 4096), (2048, 1024), (1024, 6144), (3072, 1024)):  # W-GPU's projections
        assert lora_fused.fused_settings(1, k, 16, width) is not None
    assert lora_fused.fused_settings(1, 12288, 16, 4096) is None  # 8B's down: a long shrink
    assert lora_fused.fused_settings(1, 4096, 64, 6144) is None
    assert lora_fused.fused_settings(BGMV_MAX_TOKENS + 1, 1024, 16, 4096) is None
    for k, rank, width in ((1024, 16, 4096), (3072, 64, 1024), (4096, 16, 24576)):
        s = lora_fused.default_settings(k, rank, width)
        assert 4 <= width // s.block_n <= 128 and s.block_k <= triton.next_power_of_2(k)


def test_a_measured_table_overrides_the_rule(tmp_path, monkeypatch):
    import json

    table = tmp_path / "fused.json"
    table.write_text(json.dumps({"choices": [
        {"m": 8, "k": 1024, "rank": 16, "width": 4096, "fused": True, "block_n": 64, "block_k": 512, "num_warps": 4,
         "unroll": True},
        {"m": 1, "k": 1024, "rank": 16, "width": 4096, "fused": False},
        {"m": 1, "k": 2048, "rank": 16, "width": 1024, "block_n": 32, "block_k": 1024, "num_warps": 4, "pdl": True}]}))
    monkeypatch.setenv(lora_fused.TABLE_ENV, str(table))
    lora_fused.fused_settings.cache_clear()
    try:
        assert lora_fused.fused_settings(5, 1024, 16, 4096) == lora_fused.FusedSettings(64, 512, 4, True)
        assert lora_fused.fused_settings(16, 1024, 16, 4096) == lora_fused.FusedSettings(64, 512, 4, True)
        assert lora_fused.fused_settings(2, 1024, 16, 4096) is None  # bucket 2 takes bucket 1's entry
        assert lora_fused.fused_settings(1, 1024, 16, 4096) is None
        assert lora_fused.fused_settings(1, 1024, 16, 1024) is not None  # not in the table: the rule
        assert lora_fused.fused_settings(4, 2048, 16, 1024) == lora_fused.FusedSettings(32, 1024, 4, False, True)
        table.write_text("{not json")
        lora_fused.fused_settings.cache_clear()
        lora_fused._table.cache_clear()
        with pytest.warns(UserWarning, match="not a LoRA launch table"):
            assert lora_fused.fused_settings(1, 1024, 16, 4096) == lora_fused.default_settings(1024, 16, 4096)
    finally:
        lora_fused.fused_settings.cache_clear()
        lora_fused._table.cache_clear()
