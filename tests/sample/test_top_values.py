"""``top_values``: the block search gives exactly ``torch.topk``'s values, ties and -inf included."""

from __future__ import annotations

import pytest
import torch

from infercore.sample.truncation import top_values


@pytest.mark.parametrize(("vocab", "width"), [(151936, 50), (151936, 1), (32000, 50), (9000, 1024), (2048 * 4, 7), (151936, 1024), (70000, 600),
                                              (3000, 50)])
def test_matches_torch_topk(vocab: int, width: int) -> None:
    gen = torch.Generator().manual_seed(vocab + width)
    logits = torch.randn((3, vocab), generator=gen)
    # Ties across blocks, a row of -inf past a few values, and rounded values with many repeats.
    logits[0, ::977] = 5.0
    logits[1, 10:] = float("-inf")
    logits[2] = (logits[2] * 4).round()
    want = logits.topk(width, dim=-1).values
    assert torch.equal(top_values(logits, width), want)


def test_strided_rows() -> None:
    logits = torch.randn((4, 2 * 40000))[:, ::2]
    assert torch.equal(top_values(logits, 20), logits.topk(20, dim=-1).values)


def test_top_values_crowded_into_one_block() -> None:
    """All of a row's largest values in one block, the rest of the row tied just below them."""
    logits = torch.full((2, 151936), -1.0)
    logits[0, 384:384 + 128] = torch.arange(128, dtype=torch.float32)
    logits[1, 5:7] = 3.0
    logits[1, 151900:] = 2.0  # the tail past the last whole block
    for width in (1, 50, 100):
        assert torch.equal(top_values(logits, width), logits.topk(width, dim=-1).values)
