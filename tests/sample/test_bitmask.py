import torch
from sampler_helpers import sample

from infercore.sampling_params import SamplingParams

VOCAB = 100  # not a multiple of 32


def bitmask_allowing(rows: list[list[int]]) -> torch.Tensor:
    mask = torch.zeros(len(rows), (VOCAB + 31) // 32, dtype=torch.int32)
    for r, tokens in enumerate(rows):
        for t in tokens:
            word = int(mask[r, t // 32]) | (1 << (t % 32))
            mask[r, t // 32] = word - (1 << 32) if word >= 1 << 31 else word
    return mask


def test_bitmask_forbids_tokens_for_sampled_and_greedy_rows() -> None:
    allowed = [[3, 31, 63, 99], [0, 1, 2, 95]] * 200
    bitmask = bitmask_allowing(allowed)
    logits = torch.randn(len(allowed), VOCAB)
    params = [SamplingParams(temperature=2.0)] * (len(allowed) - 2) + [SamplingParams(temperature=0)] * 2
    tokens = sample(logits, params, grammar_bitmask=bitmask)
    assert all(t in a for t, a in zip(tokens.tolist(), allowed))
    assert set(tokens[0:-2:2].tolist()) == {3, 31, 63, 99}
    for row in (-2, -1):
        options = torch.tensor(allowed[row])
        assert tokens[row] == options[logits[row, options].argmax()]


def test_all_ones_bitmask_changes_nothing() -> None:
    logits = torch.randn(4, VOCAB)
    bitmask = torch.full((4, (VOCAB + 31) // 32), -1, dtype=torch.int32)
    tokens = sample(logits, [SamplingParams(temperature=0)] * 4, grammar_bitmask=bitmask)
    assert torch.equal(tokens, logits.argmax(dim=-1))
