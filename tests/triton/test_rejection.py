"""``accept_drafts``: the Triton kernel through the interpreter against the torch reference, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from infercore.ops import reference
from infercore.sampling_params import SamplingParams
from infercore.spec_decode.position_metadata import positions_metadata
from infercore.spec_decode.rejection_sampler import RejectionSampler
from infercore_triton import rejection


def _inputs(batch: int, width: int, vocab: int, seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    drafts = torch.randint(0, vocab, (batch, width), generator=g)
    num_drafts = torch.randint(0, width + 1, (batch,), generator=g)
    greedy = torch.rand(batch, generator=g) < 0.4
    # Greedy rows: the target's argmax agrees with the draft most of the time, so walks run long.
    argmax = torch.where(torch.rand(batch, width, generator=g) < 0.7, drafts, (drafts + 1) % vocab)
    target = torch.rand(batch, width, generator=g)
    target[torch.rand(batch, width, generator=g) < 0.1] = 0.0  # drafts the target forbids
    draft = torch.rand(batch, width, generator=g)
    draft[:, ::3] = 1.0  # n-gram point masses
    uniforms = (torch.randint(0, 1 << 24, (batch, width), generator=g).float() * 2.0 ** -24)
    uniforms[:, 1::2] = (target / draft)[:, 1::2].clamp(max=1 - 2.0 ** -24)  # ties at the boundary
    return drafts, num_drafts, greedy, argmax, target, draft, uniforms


@pytest.mark.parametrize(("batch", "width"), [(1, 1), (5, 3), (130, 4), (7, 0), (0, 2)])
def test_kernel_accepts_what_the_reference_accepts(batch: int, width: int) -> None:
    for seed in range(3):
        args = _inputs(batch, width, 50, seed)
        expected = reference.accept_drafts(*args)
        got = rejection.accept_drafts(*args)
        assert got.dtype == torch.int64 and torch.equal(got, expected)


def test_kernel_stops_at_the_first_failing_draft() -> None:
    drafts = torch.tensor([[4, 4, 4], [1, 2, 3], [7, 7, 7]])
    num_drafts = torch.tensor([3, 3, 2])
    greedy = torch.tensor([True, False, False])
    argmax = torch.tensor([[4, 5, 4], [0, 0, 0], [0, 0, 0]])
    target = torch.tensor([[0.0, 0.0, 0.0], [0.9, 0.1, 0.9], [1.0, 1.0, 1.0]])
    draft = torch.ones(3, 3)
    uniforms = torch.tensor([[0.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.99, 0.99, 0.0]])
    got = rejection.accept_drafts(drafts, num_drafts, greedy, argmax, target, draft, uniforms)
    assert got.tolist() == [1, 1, 2]


def test_rejection_sampler_tokens_are_the_same_with_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sampler's whole verification gives the same tokens with either acceptance op."""
    vocab, rows = 16, 40
    g = torch.Generator().manual_seed(5)
    params = [SamplingParams(temperature=0.0) if r % 3 == 0 else SamplingParams(temperature=0.9, top_k=10, seed=r)
              for r in range(rows)]
    drafts = [torch.randint(0, vocab, (r % 4,), generator=g).tolist() for r in range(rows)]
    logits = torch.randn(sum(len(d) + 1 for d in drafts), vocab, generator=g)
    padded = torch.full((rows, 3), -1, dtype=torch.int64)
    for r, d in enumerate(drafts):
        padded[r, : len(d)] = torch.tensor(d, dtype=torch.int64)
    num_drafts = np.array([len(d) for d in drafts])

    def run(op: object) -> torch.Tensor:
        sampler = RejectionSampler()
        monkeypatch.setattr(sampler, "_op", lambda name, device: op if name == "accept_drafts"
                            else getattr(reference, name))
        metadata = positions_metadata(params, [[]] * rows, [[]] * rows, drafts, vocab, torch.device("cpu"),
                                      seed_source=np.random.default_rng(0))
        return sampler.verify(logits.clone(), metadata, padded, num_drafts).token_ids

    assert torch.equal(run(rejection.accept_drafts), run(reference.accept_drafts))
