import torch
from sampler_helpers import sample

from infercore.sampling_params import SamplingParams

ROWS = 20000
LOGITS = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0])


def frequencies(params: SamplingParams) -> torch.Tensor:
    tokens = sample(LOGITS.expand(ROWS, -1).contiguous(), [params] * ROWS)
    return torch.bincount(tokens, minlength=LOGITS.numel()).float() / ROWS


def test_temperature_one_follows_softmax() -> None:
    assert torch.allclose(frequencies(SamplingParams(temperature=1.0)), LOGITS.softmax(-1), atol=0.015)


def test_temperature_sharpens_and_flattens() -> None:
    for temperature in (0.5, 2.0):
        freq = frequencies(SamplingParams(temperature=temperature))
        assert torch.allclose(freq, (LOGITS / temperature).softmax(-1), atol=0.015)
        assert (freq - LOGITS.softmax(-1)).abs().max() > 0.08
