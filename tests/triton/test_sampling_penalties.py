"""``apply_penalties`` and the thresholded ``gumbel_argmax``: Triton kernels through the interpreter,
bit for bit against the torch reference, on tiny shapes."""

from __future__ import annotations

import pytest
import torch
from seeded_batch_cases import check_seeded_rows_ignore_their_neighbours

from infercore.ops import reference
from infercore.plugins import get_plugin_manager
from infercore.sample import Sampler
from infercore_triton import sampling, sampling_penalties

TABLE_ROWS, VOCAB = 7, 1000


def penalty_case(batch: int, vocab: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Logits with the awkward values (±0, ±inf, huge, tiny), tables with prompts and counts, and rows
    with every kind of penalty: neutral, repetition only, negative presence and frequency, mixed."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(batch, vocab, generator=g) * 4
    logits[0, :6] = torch.tensor([0.0, -0.0, float("-inf"), float("inf"), 3e38, -1e-40])
    logits[1, 10:14] = torch.tensor([-0.0, 0.0, float("-inf"), 1e-45])
    prompt = torch.rand(TABLE_ROWS, vocab, generator=g) < 0.2
    counts = torch.randint(0, 4, (TABLE_ROWS, vocab), generator=g, dtype=torch.int32)
    counts[torch.rand(TABLE_ROWS, vocab, generator=g) < 0.7] = 0
    prompt[:, :14] = True
    counts[:, 5:14:2] = 2
    rows = torch.randperm(TABLE_ROWS, generator=g)[:batch].long()
    repetition = torch.tensor([1.0, 1.1, 0.8, 1.0, 1.7, 1.0])[:batch].unsqueeze(1)
    presence = torch.tensor([0.0, 0.5, -0.5, 0.0, 0.3, -0.25])[:batch].unsqueeze(1)
    frequency = torch.tensor([0.0, 0.0, -1.1, 0.2, 0.7, -0.3])[:batch].unsqueeze(1)
    return logits, rows, prompt, counts, repetition, presence, frequency


def bits(x: torch.Tensor) -> torch.Tensor:
    """The float32 bit patterns: -0.0 and 0.0 differ, NaNs compare by payload."""
    return x.view(torch.int32)


@pytest.mark.parametrize("block", [2048, 128])
def test_penalty_kernel_is_bit_identical_to_the_reference(block: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sampling_penalties, "_BLOCK", block)  # one tile per row, or eight with a ragged end
    logits, *tables = penalty_case(6, VOCAB)
    expected = reference.apply_penalties(logits.clone(), *tables)
    got = logits.clone()
    assert sampling_penalties.apply_penalties(got, *tables) is got
    assert torch.equal(bits(got), bits(expected))
    assert not torch.equal(got[1:3], logits[1:3]) and torch.equal(bits(got[0]), bits(logits[0]))


def test_penalty_kernel_reads_row_strided_logits_and_flat_penalties() -> None:
    """A column slice of wider rows is penalised in place; [B] penalties act as [B, 1]."""
    logits, rows, prompt, counts, *penalties = penalty_case(4, VOCAB, seed=1)
    wide = torch.zeros(4, VOCAB + 24)
    wide[:, :VOCAB] = logits
    flat = [p.squeeze(1) for p in penalties]
    sampling_penalties.apply_penalties(wide[:, :VOCAB], rows, prompt, counts, *flat)
    expected = reference.apply_penalties(logits.clone(), rows, prompt, counts, *penalties)
    assert torch.equal(bits(wide[:, :VOCAB]), bits(expected)) and not wide[:, VOCAB:].any()


def test_penalty_kernel_refuses_tables_it_cannot_read() -> None:
    logits, rows, prompt, counts, *penalties = penalty_case(3, VOCAB)
    with pytest.raises(ValueError, match="int32 tables"):
        sampling_penalties.apply_penalties(logits, rows, prompt, counts.float(), *penalties)
    with pytest.raises(ValueError, match="float32 logits"):
        sampling_penalties.apply_penalties(logits.bfloat16(), rows, prompt, counts, *penalties)


GUMBEL = {"triton": sampling.gumbel_argmax, "reference": reference.gumbel_argmax}


@pytest.mark.parametrize("name", list(GUMBEL))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_threshold_draws_what_a_mask_draws(name: str, dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    """Logits below the row's threshold count as -inf: the tokens are those of the masked logits,
    greedy rows and rows without a cut (-inf threshold) included, in one block or many."""
    monkeypatch.setattr(sampling, "_MAX_BLOCK", 256)
    op = GUMBEL[name]
    g = torch.Generator().manual_seed(5)
    logits = (torch.randn(6, VOCAB, generator=g) * 3).to(dtype)
    logits[2, [3, 900]] = 20.0  # a greedy tie above the cut
    threshold = logits.topk(40, dim=-1).values[:, -1:].clone()
    threshold[1] = float("-inf")
    temperature = torch.tensor([0.7, 1.0, 0.0, 1.5, 0.0, 3.0])
    masked = logits.masked_fill(logits < threshold, float("-inf"))
    for offset in range(3):
        seeds = torch.arange(6) * 7919 + offset
        tokens = op(logits, temperature, seeds, threshold=threshold)
        assert torch.equal(tokens, op(masked, temperature, seeds))
        assert (logits.gather(1, tokens.unsqueeze(1)) >= threshold).all()
    assert tokens[2] == 3 and tokens[4] == logits[4].argmax()


def test_sampler_with_the_triton_kernels_keeps_seeded_rows_alike_in_any_batch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Penalties and the thresholded draw through the kernels: a seeded row's tokens never depend on
    its neighbours."""
    ops = {"gumbel_argmax": sampling.gumbel_argmax, "apply_penalties": sampling_penalties.apply_penalties}
    monkeypatch.setattr(Sampler, "_op", lambda self, name, device: ops[name])
    check_seeded_rows_ignore_their_neighbours(Sampler(), 200, torch.device("cpu"), steps=2)


def test_penalties_registered_for_the_triton_platforms_with_the_reference_elsewhere() -> None:
    ops = get_plugin_manager().registry("custom_op")
    for platform in ("cuda", "rocm", "xpu"):
        assert ops.get("apply_penalties", platform).target == "infercore_triton.sampling_penalties:apply_penalties"
    assert ops.get("apply_penalties", "cpu").target == "infercore.ops.reference:apply_penalties"
