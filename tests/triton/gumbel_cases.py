"""Checks of a ``gumbel_argmax`` implementation, shared by the interpreter, reference and GPU tests.

Each takes the op and a device; shapes are parameters so the GPU tests can run them at model size.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

GumbelArgmax = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]

#: Upper 0.1% points of the chi-square distribution, by degrees of freedom.
CHI2_999 = {3: 16.266, 5: 20.515, 7: 24.322}


def tied_logits(batch: int, vocab: int, dtype: torch.dtype, device: str, seed: int = 0) -> torch.Tensor:
    """Random rows with ties of the maximum: far apart, adjacent, everywhere, and at -inf."""
    g = torch.Generator().manual_seed(seed)
    logits = (torch.randn(batch, vocab, generator=g) * 3).to(dtype)
    top = logits.float().max().item() + 1
    logits[0, [vocab - 1, vocab // 2, 7]] = top  # ties across blocks: the smallest index wins
    logits[1, [10, 9]] = top
    logits[2] = 0.0
    logits[3] = float("-inf")
    logits[4, : vocab // 2] = float("-inf")
    return logits.to(device)


def check_greedy_is_argmax(op: GumbelArgmax, batch: int, vocab: int, dtype: torch.dtype, device: str) -> None:
    """Rows with temperature 0 give exactly ``torch.argmax``, whatever their seed and neighbours."""
    logits = tied_logits(batch, vocab, dtype, device)
    temperature = torch.zeros(batch, device=device)
    seeds = torch.arange(batch, device=device) * 7919
    expected = logits.argmax(dim=-1)
    assert torch.equal(op(logits, temperature, seeds), expected)
    assert expected[:4].tolist() == [7, 9, 0, 0]
    # Greedy rows next to sampled rows keep their argmax.
    temperature[1::2] = 1.0
    assert torch.equal(op(logits, temperature, seeds)[::2], expected[::2])


def check_same_seed_same_token(op: GumbelArgmax, batch: int, vocab: int, dtype: torch.dtype, device: str) -> None:
    """A row's token depends on its logits, temperature and seed only, not on the batch around it."""
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(batch, vocab, generator=g).to(dtype).to(device)
    temperature = torch.linspace(0.5, 1.5, batch).to(device)
    seeds = (torch.arange(batch) * 1_000_003 + 2**40).to(device)
    tokens = op(logits, temperature, seeds)
    assert torch.equal(op(logits, temperature, seeds), tokens)
    perm = torch.randperm(batch, generator=g).to(device)
    assert torch.equal(op(logits[perm], temperature[perm], seeds[perm]), tokens[perm])
    others = torch.randn(3, vocab, generator=g).to(dtype).to(device)
    mixed = op(torch.cat([others, logits[1:3]]), torch.cat([torch.ones(3, device=device), temperature[1:3]]),
               torch.cat([seeds[:3] + 5, seeds[1:3]]))
    assert torch.equal(mixed[3:], tokens[1:3])
    # Flat rows at temperature 1: another seed draws another token (each row would repeat one in 1/V).
    flat = torch.zeros(batch, vocab, dtype=dtype, device=device)
    ones = torch.ones(batch, device=device)
    assert not torch.equal(op(flat, ones, seeds), op(flat, ones, seeds + 1))


def check_only_finite_tokens(op: GumbelArgmax, batch: int, vocab: int, dtype: torch.dtype, device: str) -> None:
    """-inf logits are never drawn while a row has a finite one; an all -inf row gives 0."""
    logits = torch.full((batch, vocab), float("-inf"), dtype=dtype)
    only = torch.linspace(0, vocab - 1, batch).long()
    logits[torch.arange(batch), only] = torch.randn(batch).to(dtype) * 50
    temperature = torch.linspace(0.05, 3.0, batch)
    for offset in range(4):
        seeds = torch.arange(batch) + offset * 104729
        tokens = op(logits.to(device), temperature.to(device), seeds.to(device))
        assert tokens.tolist() == only.tolist()
    g = torch.Generator().manual_seed(2)
    half = torch.randn(batch, vocab, generator=g).to(dtype)
    masked = torch.rand(batch, vocab, generator=g) < 0.5
    half[masked] = float("-inf")
    half[0] = float("-inf")
    tokens = op(half.to(device), temperature.to(device), torch.arange(batch).to(device)).cpu()
    assert tokens[0] == 0
    assert not masked[torch.arange(1, batch), tokens[1:]].any()


def chi_square(tokens: torch.Tensor, probs: torch.Tensor) -> float:
    """Pearson's statistic of the token counts against ``probs`` (all of them non-zero)."""
    counts = torch.bincount(tokens.cpu(), minlength=probs.numel()).double()
    expected = probs.double().cpu() * tokens.numel()
    return float(((counts - expected) ** 2 / expected).sum())


def check_follows_softmax(op: GumbelArgmax, rows: int, device: str, dtype: torch.dtype = torch.float32,
                          vocab: int = 8, support: list[int] | None = None) -> None:
    """Rows of one launch (one seed each, half at each of two temperatures) draw from
    ``softmax(logits / T)``. ``support``: where in a ``vocab``-wide row the 8 finite logits sit."""
    base = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, 0.3, 1.5, -0.5]).to(dtype)
    support = support or list(range(8))
    row = torch.full((vocab,), float("-inf"), dtype=dtype)
    row[support] = base
    logits = row.expand(rows, -1).contiguous().to(device)
    half = rows // 2
    temperature = torch.tensor([0.8] * half + [1.7] * (rows - half), device=device)
    seeds = torch.arange(rows, device=device) * 31 + 12345
    tokens = op(logits, temperature, seeds).cpu()
    assert all(t in support for t in tokens.unique().tolist())
    index = {v: i for i, v in enumerate(support)}
    for part, t in ((tokens[:half], 0.8), (tokens[half:], 1.7)):
        positions = torch.tensor([index[v] for v in part.tolist()])
        assert chi_square(positions, (base.float() / t).softmax(-1)) < CHI2_999[7]
