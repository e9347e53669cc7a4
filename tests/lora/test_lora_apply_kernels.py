"""The ``lora_apply`` Triton kernels (through Triton's interpreter without a GPU) give the torch reference's
results: the per-row (BGMV) path of decode-sized steps and the grouped (SGMV) path of larger ones, mixed
adapters, tokens without one, ranks below the slot width, 1 to 3 output slices, the hidden dimension split
over programs; and the per-step metadata the runner builds once per step."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import triton_interpreter

from infercore.lora.step_state import LoRAStepState, group_by_slot, max_tiles, tile_rows
from infercore.ops import lora_reference

triton_interpreter.widen_bfloat16_dots()

from infercore_triton.lora import BGMV_MAX_TOKENS, bgmv_settings, lora_apply, sgmv_settings  # noqa: E402

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
DECODE = [0, -1, 2, 0, 1]  # BGMV: at most BGMV_MAX_TOKENS tokens with the padding
PROMPT = [0, -1, 2, 0, 1, 1, -1, 2, 0, 0, 2, -1, 1, 0, 0, 0, 0, 0, 0, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]


def _state(slots: list[int], max_loras: int) -> tuple[LoRAStepState, int]:
    padded = len(slots) + 2  # two padding tokens, as a captured graph's size adds
    state = LoRAStepState(padded + 4, max_loras, DEVICE, pin=False)
    state.set_step(np.array(slots, dtype=np.int32), padded)
    return state, padded


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
@pytest.mark.parametrize("path", ["bgmv", "sgmv"])
def test_lora_apply_matches_the_reference(path, sizes, dtype):
    slots = DECODE if path == "bgmv" else PROMPT
    assert (len(slots) + 2 <= BGMV_MAX_TOKENS) == (path == "bgmv")
    _check(slots, sizes, hidden=40, dtype=dtype)


@pytest.mark.parametrize("path", ["bgmv", "sgmv"])
def test_the_hidden_dimension_splits_over_programs(path):
    hidden = 1100  # not a multiple of any block
    slots = DECODE if path == "bgmv" else PROMPT
    nr = 2 * 16
    if path == "bgmv":
        assert bgmv_settings(hidden, nr)[2] > 1
    else:
        t = len(slots) + 2
        assert sgmv_settings(max_tiles(t, 3), hidden, nr)[3] > 1
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


@pytest.mark.parametrize("path", ["bgmv", "sgmv"])
def test_wide_slots_span_several_column_blocks(path):
    # Three slices of rank 20 in slots 32 wide: 96 shrink columns, more than one block of them.
    _check(DECODE if path == "bgmv" else PROMPT, (24, 16, 16), hidden=72, dtype=torch.float32, rank=20,
           slot_width=32)
