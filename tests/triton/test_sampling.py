"""``gumbel_argmax``: the Triton kernel through the interpreter and the torch reference, on tiny shapes."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl
from gumbel_cases import (
    check_follows_softmax,
    check_greedy_is_argmax,
    check_only_finite_tokens,
    check_same_seed_same_token,
)
from seeded_batch_cases import check_seeded_rows_ignore_their_neighbours

from infercore.ops import reference
from infercore.plugins import get_plugin_manager
from infercore.sample import Sampler
from infercore_triton import sampling

OPS = {"triton": sampling.gumbel_argmax, "reference": reference.gumbel_argmax}
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


@pytest.fixture(params=list(OPS))
def op(request: pytest.FixtureRequest):
    return OPS[request.param]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("vocab", [1000, 5000])
def test_greedy_rows_are_torch_argmax(op, dtype: torch.dtype, vocab: int) -> None:
    check_greedy_is_argmax(op, 6, vocab, dtype, "cpu")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_same_seed_same_token_in_any_batch(op, dtype: torch.dtype) -> None:
    check_same_seed_same_token(op, 6, 4500, dtype, "cpu")


def test_only_finite_logits_are_drawn(op) -> None:
    check_only_finite_tokens(op, 6, 3000, torch.bfloat16, "cpu")


def test_draws_follow_the_tempered_softmax(op) -> None:
    check_follows_softmax(op, 4000, "cpu")


def test_bfloat16_and_float32_rows_draw_alike(op) -> None:
    """The division and the argmax run in float32: bf16 logits draw what their float32 copy draws."""
    logits = torch.randn(8, 3000).bfloat16()
    temperature, seeds = torch.full((8,), 0.6), torch.arange(8) + 77
    assert torch.equal(op(logits, temperature, seeds), op(logits.float(), temperature, seeds))


def test_kernel_tokens_do_not_depend_on_the_block_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """Philox counters follow the token id, so any split of the vocabulary draws the same tokens."""
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(5, 1000, generator=g).bfloat16()
    logits[0, 900] = logits[0, 100] = 10.0  # a greedy tie across blocks
    temperature = torch.tensor([0.0, 0.7, 1.0, 2.0, 0.0])
    seeds = torch.tensor([1, 2, 3, 2**62 + 5, 8])
    one_block = sampling.gumbel_argmax(logits, temperature, seeds)
    monkeypatch.setattr(sampling, "_MAX_BLOCK", 128)  # 8 blocks, two kernels
    assert torch.equal(sampling.gumbel_argmax(logits, temperature, seeds), one_block)
    assert one_block[0] == 100 and one_block[4] == logits[4].argmax()


@triton.jit
def _philox_uniforms(seed, out_ptr, QUADS: tl.constexpr):
    quads = tl.arange(0, QUADS)
    u0, u1, u2, u3 = tl.rand4x(seed, quads)
    tl.store(out_ptr + quads * 4, u0)
    tl.store(out_ptr + quads * 4 + 1, u1)
    tl.store(out_ptr + quads * 4 + 2, u2)
    tl.store(out_ptr + quads * 4 + 3, u3)


def test_kernel_draw_for_token_v_is_philox_output_v_mod_4_of_counter_v_div_4() -> None:
    """The documented stream: of two equal logits, the token with the larger uniform wins."""
    seed, vocab = 2**61 + 12345, 32
    uniforms = torch.empty(vocab)
    _philox_uniforms[(1,)](seed, uniforms, QUADS=vocab // 4)
    pairs = [(v, v + 1) for v in range(vocab - 1)] + [(v, v + 5) for v in range(vocab - 5)]
    logits = torch.full((len(pairs), vocab), float("-inf"))
    for row, pair in enumerate(pairs):
        logits[row, list(pair)] = 0.0
    tokens = sampling.gumbel_argmax(logits, torch.ones(len(pairs)), torch.full((len(pairs),), seed))
    assert tokens.tolist() == [max(pair, key=lambda v: uniforms[v]) for pair in pairs]


def test_row_strided_logits(op) -> None:
    """A column slice of wider rows (tensor-parallel padding) samples as its contiguous copy."""
    wide = torch.randn(4, 1100).bfloat16()
    temperature, seeds = torch.tensor([0.0, 0.5, 1.0, 1.5]), torch.arange(4)
    assert torch.equal(op(wide[:, :1000], temperature, seeds), op(wide[:, :1000].contiguous(), temperature, seeds))


def test_seeded_rows_draw_alike_alone_and_beside_any_neighbour(op, monkeypatch: pytest.MonkeyPatch) -> None:
    """Top-k, top-p, min-p, penalised, greedy and plain neighbours all leave a seeded row's tokens as
    they are alone: every batch draws through the op, keyed by the row seed and the token id."""
    monkeypatch.setattr(Sampler, "_gumbel_op", lambda self, device: op)
    check_seeded_rows_ignore_their_neighbours(Sampler(), 200, torch.device("cpu"))


def test_registered_for_the_triton_platforms_with_the_reference_elsewhere() -> None:
    ops = get_plugin_manager().registry("custom_op")
    for platform in ("cuda", "rocm", "xpu"):
        assert ops.get("gumbel_argmax", platform).target == "infercore_triton.sampling:gumbel_argmax"
    assert ops.get("gumbel_argmax", "cpu").target == "infercore.ops.reference:gumbel_argmax"
