import torch
from sampler_helpers import sample

from infercore.sampling_params import SamplingParams

VOCAB = 100


def test_logit_bias_forces_and_forbids() -> None:
    logits = torch.randn(64, VOCAB)
    forced = sample(logits, [SamplingParams(logit_bias={42: 100.0})] * 64)
    assert (forced == 42).all()
    top = logits.argmax(dim=-1)
    forbidden = [SamplingParams(temperature=0, logit_bias={int(t): -100.0}) for t in top]
    assert not (sample(logits, forbidden) == top).any()


def test_min_tokens_masks_eos_and_stop_ids_until_reached() -> None:
    logits = torch.zeros(3, VOCAB)
    logits[:, 2] = 10.0  # EOS
    logits[:, 7] = 9.0  # a stop token id
    logits[:, 50] = 8.0
    params = [SamplingParams(temperature=0, min_tokens=3, stop_token_ids=[7])] * 3
    outputs = [[], [11, 12], [11, 12, 13]]
    tokens = sample(logits, params, outputs=outputs, eos_token_ids=[2, 2, 2])
    assert tokens.tolist() == [50, 50, 2]


def test_min_tokens_leaves_eos_alone_when_eos_is_ignored() -> None:
    logits = torch.zeros(1, VOCAB)
    logits[0, 2] = 10.0
    params = [SamplingParams(temperature=0, min_tokens=3, ignore_eos=True)]
    assert sample(logits, params, eos_token_ids=[2]).item() == 2
