"""The acceptance walk's reference and the uniforms that key its tests."""

from __future__ import annotations

import torch

from infercore.ops import reference
from infercore.sample.gumbel import step_seed
from infercore.spec_decode.uniforms import acceptance_uniforms


def test_walk_stops_at_the_first_failure_and_at_the_row_count() -> None:
    drafts = torch.tensor([[4, 4, 4], [1, 2, 3], [7, 7, 7], [1, 1, 1]])
    num_drafts = torch.tensor([3, 3, 2, 0])
    greedy = torch.tensor([True, False, False, False])
    argmax = torch.tensor([[4, 5, 4], [0, 0, 0], [0, 0, 0], [0, 0, 0]])
    target = torch.tensor([[0.0, 0.0, 0.0], [0.9, 0.1, 0.9], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    draft = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.05, 1.0], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    uniforms = torch.tensor([[0.0, 0.0, 0.0], [0.5, 0.99, 0.95], [0.99, 0.99, 0.0], [0.0, 0.0, 0.0]])
    # Row 1: 0.5 < 0.9; 0.99 * 0.05 < 0.1 (p > q always passes); 0.95 >= 0.9 fails.
    assert reference.accept_drafts(drafts, num_drafts, greedy, argmax, target, draft, uniforms).tolist() == [1, 2, 2, 0]


def test_a_draft_the_target_forbids_never_passes() -> None:
    ones = torch.ones(1, 1)
    zero_u = torch.zeros(1, 1)
    args = (torch.zeros(1, 1, dtype=torch.int64), torch.ones(1, dtype=torch.int64), torch.zeros(1, dtype=torch.bool),
            torch.zeros(1, 1, dtype=torch.int64))
    assert reference.accept_drafts(*args, torch.zeros(1, 1), ones, zero_u).tolist() == [0]
    assert reference.accept_drafts(*args, ones, ones, zero_u).tolist() == [1]


def test_uniforms_depend_on_the_seed_alone() -> None:
    seeds = torch.tensor([step_seed(42, n) for n in range(8)])
    alone = acceptance_uniforms(seeds)
    batched = acceptance_uniforms(torch.cat([torch.arange(100), seeds]))[100:]
    assert torch.equal(alone, batched) and torch.equal(acceptance_uniforms(seeds.view(2, 4)).flatten(), alone)
    assert len(set(alone.tolist())) == 8


def test_uniforms_are_uniform_on_the_unit_interval() -> None:
    u = acceptance_uniforms(torch.arange(200_000) * 0x9E3779B9)
    assert float(u.min()) >= 0.0 and float(u.max()) < 1.0 and u.dtype == torch.float32
    histogram = torch.histc(u, bins=20, min=0.0, max=1.0) / len(u)
    assert float((histogram - 0.05).abs().max()) < 0.003
    assert abs(float(torch.corrcoef(torch.stack([u[1:], u[:-1]]))[0, 1])) < 0.01  # neighbouring seeds
