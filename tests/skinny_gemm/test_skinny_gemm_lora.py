"""The skinny GEMM with a LoRA adapter term added in the same pass (through Triton's interpreter), and the
``lora_linear`` op that chooses it: against the torch reference (``lora_linear``: the base product, then
``lora_apply``) for merged q/k/v-like slices, rows of several slots and none, split K, bias, and a SwiGLU's
gated input; the op's choice between one launch and the base op plus ``lora_apply``."""

from __future__ import annotations

import pytest
import torch
import triton

from infercore.ops import lora_reference
from infercore_triton import lora_linear as ll
from infercore_triton import skinny_gemm as sg

K = 96
#: Three output slices (q, k, v) on multiples of 32 columns, as the in-GEMM launch settings need.
SLICES = (0, 64, 96, 128)
RANK = 8
SLOTS = 3


def _operands(m: int, dtype: torch.dtype, seed: int, slices: tuple[int, ...] = SLICES, gated: bool = False,
              slots: list[int] | None = None) -> tuple:
    """(x, weight, bias, lora_a, lora_b, token_slots, sorted_tokens, tiles, tile_rows, slices) as the layer
    passes them; rows cycle through no adapter and the slots unless ``slots`` says."""
    gen = torch.Generator().manual_seed(seed)
    n, pieces = slices[-1], len(slices) - 1
    x = torch.randn(m, 2 * K if gated else K, generator=gen).to(dtype)
    weight = (torch.randn(n, K, generator=gen) * 0.2).to(dtype)
    bias = torch.randn(n, generator=gen).to(dtype)
    lora_a = (torch.randn(SLOTS, pieces * RANK, K, generator=gen) * 0.3).to(dtype)
    lora_b = (torch.randn(SLOTS, n, RANK, generator=gen) * 0.3).to(dtype)
    token_slots = torch.tensor(slots if slots is not None else [(i % (SLOTS + 1)) - 1 for i in range(m)],
                               dtype=torch.int32)
    grouping = (torch.zeros(m, dtype=torch.int32), torch.full((1, 3), -1, dtype=torch.int32), 16)
    return x, weight, bias, lora_a, lora_b, token_slots, *grouping, slices


def _rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.float() - ref.float()).abs().max() / ref.float().abs().max())


def _term(args: tuple) -> sg.LoRATerm:
    x, weight, bias, lora_a, lora_b, token_slots, *_, slices = args
    return sg.LoRATerm(lora_a, lora_b, token_slots, slices)


CONFIGS = {
    "one-block-a-slice": sg.SkinnyConfig(block_n=32, block_k=32),
    "split-k": sg.SkinnyConfig(block_n=32, block_k=16, split_k=3),
    "narrow-blocks": sg.SkinnyConfig(block_n=8, block_k=64, prefetch=False),
    "dot": sg.SkinnyConfig(block_n=16, block_k=16, dot=True),
}


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("m", [1, 4])
@pytest.mark.parametrize("gated", [False, True])
def test_float32_term_inside_the_gemm_matches_the_product_then_lora_apply(name: str, m: int, gated: bool) -> None:
    args = _operands(m, torch.float32, seed=m + 10 * gated, gated=gated)
    x, weight, bias = args[:3]
    out = sg.skinny_gemm(x, weight, bias, CONFIGS[name], gated=gated, lora=_term(args))
    expected = lora_reference.lora_linear(*args, gated)
    assert out.shape == expected.shape and _rel_err(out, expected) < 1e-5
    # The term is really there: without it the rows with a slot differ.
    plain = sg.skinny_gemm(x, weight, bias, CONFIGS[name], gated=gated)
    with_slot = args[5] >= 0
    assert torch.allclose(plain[~with_slot], out[~with_slot], atol=1e-6)
    if with_slot.any():
        assert not torch.allclose(plain[with_slot], out[with_slot], atol=1e-3)


@pytest.mark.parametrize("m", [1, 2, 3])
def test_bfloat16_rounds_once_within_the_two_launch_paths_rounding(m: int) -> None:
    """In bf16 the one launch rounds product + term once; the reference rounds the product, then the sum.
    Both stay within a bf16 rounding of the float32 result."""
    args = _operands(m, torch.bfloat16, seed=30 + m, slots=[0, 2, 1][:m])
    x, weight, bias = args[:3]
    out = sg.skinny_gemm(x, weight, bias, ll.in_gemm_config(m, SLICES[-1], K, RANK), lora=_term(args))
    exact = lora_reference.lora_linear(*(a.float() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                                         for a in args), False)
    assert out.dtype == torch.bfloat16 and _rel_err(out, exact) < 1e-2
    assert _rel_err(out, lora_reference.lora_linear(*args, False)) < 2e-2


def test_a_block_that_straddles_two_slices_is_refused() -> None:
    args = _operands(1, torch.float32, seed=1, slices=(0, 48, 96, 128))
    term = _term(args)
    assert not term.fits(32) and term.fits(16)
    with pytest.raises(ValueError, match="multiples of block_n"):
        sg.skinny_gemm(*args[:3], sg.SkinnyConfig(block_n=32, block_k=32), lora=term)


def test_in_gemm_settings_keep_a_reads_at_most_half_the_weight_reads_and_fill_the_gpu() -> None:
    for m, n, k, rank in ((1, 4096, 1024, 16), (1, 1024, 2048, 16), (4, 6144, 1024, 16), (1, 1024, 3072, 64)):
        cfg = ll.in_gemm_config(m, n, k, rank)
        assert rank <= cfg.block_n // 2 or cfg.block_n == 64
        assert cfg.block_n * triton.next_power_of_2(m) * cfg.block_k <= sg._ELEMENTWISE_TILE
        programs = -(-n // cfg.block_n) * cfg.split_k
        assert programs >= 132 or k < 2 * cfg.split_k * cfg.block_k, (m, n, k, cfg)


@pytest.fixture
def launches(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """The one-launch path on CPU tensors (float32 too), recording whether each GEMM had a LoRA term."""
    calls: list[bool] = []
    real = sg.skinny_gemm

    def spy(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
            config: sg.SkinnyConfig | None = None, gated: bool = False, lora: sg.LoRATerm | None = None):
        calls.append(lora is not None)
        return real(x, weight, bias, config, gated, lora)

    monkeypatch.setattr(ll, "skinny_gemm", spy)
    monkeypatch.setattr(ll, "_DEVICES", ("cpu",))
    monkeypatch.setattr(ll, "_DTYPES", (torch.float32, torch.bfloat16))
    monkeypatch.setenv(ll.IN_GEMM_ENV, "1")
    return calls


@pytest.mark.parametrize("gated", [False, True])
def test_lora_linear_op_runs_decode_steps_as_one_launch_and_others_as_two(launches: list[bool], gated: bool,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    for m, one_launch in ((1, True), (4, True), (5, False)):
        launches.clear()
        args = _operands(m, torch.float32, seed=50 + m, gated=gated)
        out = ll.lora_linear(*args, gated)
        assert launches == ([True] if one_launch else [])
        assert _rel_err(out, lora_reference.lora_linear(*args, gated)) < 1e-5
    launches.clear()
    monkeypatch.delenv(ll.IN_GEMM_ENV)  # off by default
    args = _operands(2, torch.float32, seed=60, gated=gated)
    assert _rel_err(ll.lora_linear(*args, gated), lora_reference.lora_linear(*args, gated)) < 1e-5
    assert launches == []


def test_slices_the_settings_cannot_split_fall_back_to_two_launches(launches: list[bool]) -> None:
    args = _operands(1, torch.float32, seed=70, slices=(0, 48, 96, 128))
    out = ll.lora_linear(*args, False)
    assert launches == [] and _rel_err(out, lora_reference.lora_linear(*args, False)) < 1e-5


def test_registered_as_the_lora_linear_op_of_cuda_only() -> None:
    from infercore.plugins.manager import get_plugin_manager

    regs = [r for r in get_plugin_manager().registry("custom_op").all()
            if r.name == "lora_linear" and r.plugin == "triton"]
    assert [r.metadata.get("platform") for r in regs] == ["cuda"]
    assert regs[0].load() is ll.lora_linear
