import pytest
import torch
from sampler_helpers import sample

from infercore.sampling_params import SamplingParams

ROWS = 4000


def distinct_logits(vocab_size: int, scale: float = 1.0, rows: int = ROWS) -> torch.Tensor:
    """One row of distinct logits in a shuffled order, repeated ``rows`` times."""
    row = torch.linspace(scale, -scale, vocab_size)[torch.randperm(vocab_size)]
    return row.expand(rows, -1).contiguous()


def nucleus(row: torch.Tensor, top_p: float) -> set[int]:
    """Straightforward top-p: most likely first, keep while the mass before a token is < top_p."""
    probs, order = row.softmax(-1).sort(descending=True)
    before = probs.cumsum(-1) - probs
    return set(order[before < top_p].tolist())


def test_top_k_never_leaves_the_top_k() -> None:
    logits = distinct_logits(200, scale=0.5)
    tokens = sample(logits, [SamplingParams(top_k=7)] * ROWS)
    allowed = set(logits[0].topk(7).indices.tolist())
    assert set(tokens.tolist()) == allowed


@pytest.mark.parametrize(("vocab_size", "scale", "rows"), [(300, 4.0, ROWS), (2500, 0.1, 1500)])
def test_top_p_never_leaves_the_nucleus(vocab_size: int, scale: float, rows: int) -> None:
    # The second nucleus is wider than the 1024 topk candidates, so it takes the full-sort path.
    logits = distinct_logits(vocab_size, scale, rows)
    allowed = nucleus(logits[0], 0.8)
    assert 5 < len(allowed) < vocab_size
    tokens = set(sample(logits, [SamplingParams(top_p=0.8)] * rows).tolist())
    assert tokens <= allowed
    assert len(tokens) > len(allowed) // 2


def test_top_p_follows_the_renormalised_nucleus() -> None:
    logits = torch.tensor([3.0, 2.0, 1.0, 0.0, -1.0]).expand(20000, -1).contiguous()
    tokens = sample(logits, [SamplingParams(top_p=0.9)] * 20000)
    kept = logits[0].softmax(-1)[:3]
    freq = torch.bincount(tokens, minlength=5).float() / 20000
    assert torch.allclose(freq[:3], kept / kept.sum(), atol=0.015) and freq[3:].sum() == 0


def test_top_k_and_top_p_together_apply_top_p_inside_the_top_k() -> None:
    logits = torch.tensor([2.0, 1.9, 1.8, 1.7, 0.0, -1.0]).expand(ROWS, -1).contiguous()
    tokens = set(sample(logits, [SamplingParams(top_k=4, top_p=0.7)] * ROWS).tolist())
    assert tokens == nucleus(logits[0, :4], 0.7)


def test_unrestricted_rows_are_untouched_next_to_truncated_rows() -> None:
    logits = distinct_logits(50, scale=0.2)
    params = [SamplingParams(top_k=2) if i % 2 else SamplingParams() for i in range(ROWS)]
    tokens = sample(logits, params)
    assert set(tokens[1::2].tolist()) == set(logits[0].topk(2).indices.tolist())
    assert len(set(tokens[0::2].tolist())) > 40


def test_min_p_forbids_tokens_below_the_fraction_of_the_top_probability() -> None:
    logits = torch.tensor([0.0, -0.5, -1.0, -2.0, -3.0]).expand(ROWS, -1).contiguous()
    # probabilities relative to the top: 1, 0.61, 0.37, 0.14, 0.05
    tokens = set(sample(logits, [SamplingParams(min_p=0.3)] * ROWS).tolist())
    assert tokens == {0, 1, 2}


def test_min_p_applies_after_temperature() -> None:
    logits = torch.tensor([0.0, -0.5, -1.0, -2.0, -3.0]).expand(ROWS, -1).contiguous()
    # at temperature 0.5 the relative probabilities become 1, 0.37, 0.14, ...
    tokens = set(sample(logits, [SamplingParams(min_p=0.3, temperature=0.5)] * ROWS).tolist())
    assert tokens == {0, 1}


@pytest.mark.parametrize("neighbour", [None, SamplingParams(top_k=40), SamplingParams(top_p=0.95)])
def test_tokens_tied_with_the_kth_are_kept_whatever_shares_the_batch(neighbour: SamplingParams | None) -> None:
    """Top-k cuts at the k-th largest logit: tokens tied with it stay, alone or beside a wider cut."""
    row = torch.full((60,), -1.0)
    row[3], row[[10, 20, 30]] = 5.0, 4.0
    params = [SamplingParams(top_k=2, temperature=5.0)] * ROWS + ([neighbour] if neighbour else [])
    tokens = sample(row.expand(len(params), -1).contiguous(), params)[:ROWS]
    assert set(tokens.tolist()) == {3, 10, 20, 30}


def test_a_wide_nucleus_is_cut_alike_alone_and_beside_narrow_ones() -> None:
    """A top-p row whose nucleus reaches past the topk candidates keeps the same tokens in any batch."""
    logits = distinct_logits(2500, 0.1, rows=40)
    params = [SamplingParams(top_p=0.8, seed=seed) for seed in range(40)]
    alone = sample(logits, params)
    batch = torch.cat([logits, torch.randn(3, 2500) * 3])
    beside = sample(batch, params + [SamplingParams(top_p=0.5), SamplingParams(top_k=3),
                                     SamplingParams(temperature=0)])[:40]
    assert torch.equal(alone, beside) and len(set(alone.tolist())) > 20
