"""apply_token_bitmask: the torch reference, xgrammar's kernel, and untouched unconstrained rows."""

from __future__ import annotations

import pytest
import torch
import xgrammar

from infercore.structured_output import allocate_bitmask, apply_token_bitmask, apply_token_bitmask_torch


@pytest.mark.parametrize("vocab", [32, 50, 517, 1000, 4099])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_torch_reference_matches_xgrammar_kernel(vocab: int, dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(vocab)
    for _ in range(5):
        batch = int(torch.randint(1, 9, (1,), generator=gen))
        logits = torch.randn(batch, vocab, generator=gen).to(dtype)
        bitmask = torch.randint(-(2**31), 2**31 - 1, allocate_bitmask(batch, vocab).shape,
                                generator=gen, dtype=torch.int32)
        ours, theirs = logits.clone(), logits.clone()
        apply_token_bitmask_torch(ours, bitmask)
        xgrammar.apply_token_bitmask_inplace(theirs, bitmask, vocab_size=vocab)
        assert torch.equal(ours, theirs)
        dispatched = logits.clone()
        apply_token_bitmask(dispatched, bitmask)
        assert torch.equal(ours, dispatched)


def test_reference_semantics_bit_by_bit() -> None:
    vocab = 70
    bitmask = allocate_bitmask(1, vocab)
    bitmask[0] = 0
    allowed = [0, 5, 31, 32, 63, 69]
    for token in allowed:
        bit = 1 << (token % 32)
        bitmask[0, token // 32] |= bit - (1 << 32 if bit >= 1 << 31 else 0)
    logits = torch.zeros(1, vocab)
    apply_token_bitmask_torch(logits, bitmask)
    assert torch.isfinite(logits[0]).nonzero().flatten().tolist() == allowed


def test_unconstrained_rows_are_untouched() -> None:
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 300, generator=gen)
    bitmask = allocate_bitmask(4, 300)
    bitmask[1] = 0
    bitmask[1, 0] = 1
    out = logits.clone()
    apply_token_bitmask(out, bitmask)
    for row in (0, 2, 3):
        assert torch.equal(out[row], logits[row])
    assert torch.isfinite(out[1]).sum() == 1 and out[1, 0] == logits[1, 0]


def test_shape_mismatch_is_refused() -> None:
    with pytest.raises(ValueError, match="words per row"):
        apply_token_bitmask(torch.zeros(2, 100), allocate_bitmask(2, 40))
