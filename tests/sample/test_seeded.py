import pytest
import torch
from sampler_helpers import build_metadata

from infercore.sample import Sampler
from infercore.sampling_params import SamplingParams

VOCAB = 2000
STEPS = 8
OTHERS = [
    SamplingParams(temperature=0),
    SamplingParams(),
    SamplingParams(temperature=0.3, top_k=5),
    SamplingParams(top_p=0.5),
    SamplingParams(temperature=1.7, min_p=0.05),
    SamplingParams(seed=99, top_k=50, top_p=0.95),
    SamplingParams(presence_penalty=1.0, frequency_penalty=0.5),
    SamplingParams(repetition_penalty=1.3, temperature=0.6),
    SamplingParams(logit_bias={5: 3.0}, logprobs=4),
    SamplingParams(seed=7),
    SamplingParams(top_k=1),
    SamplingParams(temperature=0.9, top_p=0.8, min_p=0.01),
    SamplingParams(temperature=0, repetition_penalty=1.5),
    SamplingParams(top_k=200),
    SamplingParams(temperature=2.0),
    SamplingParams(seed=1, temperature=0.5),
]


def step_logits(step: int, rows: int) -> torch.Tensor:
    """The same logits for every row's position in a step, whatever the batch."""
    g = torch.Generator().manual_seed(step)
    return (torch.randn(VOCAB, generator=g) * 2).expand(rows, -1).contiguous()


def run(params: list[SamplingParams], row: int) -> list[int]:
    """Sample STEPS tokens for every row; return row ``row``'s sequence."""
    outputs: list[list[int]] = [[] for _ in params]
    for step in range(STEPS):
        metadata = build_metadata(params, VOCAB, outputs=outputs)
        tokens = Sampler()(step_logits(step, len(params)), metadata).sampled_token_ids.tolist()
        for out, token in zip(outputs, tokens):
            out.append(token)
    return outputs[row]


@pytest.mark.parametrize("seeded", [
    SamplingParams(seed=42, temperature=0.8, top_p=0.9),
    SamplingParams(seed=42, temperature=1.2),
    SamplingParams(seed=42, top_k=40),
    SamplingParams(seed=42, min_p=0.02, presence_penalty=0.5),
])
def test_seeded_request_is_the_same_alone_and_in_a_batch(seeded: SamplingParams) -> None:
    alone = run([seeded], 0)
    assert run(OTHERS[:9] + [seeded] + OTHERS[9:], 9) == alone
    assert run([seeded] + OTHERS, 0) == alone
    assert len(set(alone)) > 1


def test_different_seeds_give_different_sequences() -> None:
    a = run([SamplingParams(seed=1, temperature=1.2)], 0)
    b = run([SamplingParams(seed=2, temperature=1.2)], 0)
    assert a != b
