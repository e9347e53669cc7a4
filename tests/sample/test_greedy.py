import torch
from sampler_helpers import build_metadata, sample

from infercore.sampling_params import SamplingParams


def test_greedy_is_argmax() -> None:
    logits = torch.randn(32, 1000)
    tokens = sample(logits, [SamplingParams(temperature=0)] * 32)
    assert torch.equal(tokens, logits.argmax(dim=-1))


def test_greedy_ties_pick_lowest_id() -> None:
    logits = torch.zeros(2, 10)
    logits[0, [7, 3, 5]] = 2.0
    logits[1, [9, 8]] = 1.0
    tokens = sample(logits, [SamplingParams(temperature=0)] * 2)
    assert tokens.tolist() == [3, 8]


def test_all_greedy_batch_builds_nothing_extra() -> None:
    params = [SamplingParams(temperature=0, top_k=5, top_p=0.5, min_p=0.1, seed=1)] * 4
    metadata = build_metadata(params, 100)
    assert metadata.all_greedy
    assert metadata.temperature is None and metadata.top_k_top_p is None and metadata.min_p_margin is None
    assert metadata.seeds is None
    assert metadata.penalties is None and metadata.logit_bias is None


def test_greedy_rows_stay_argmax_in_a_sampled_batch() -> None:
    logits = torch.randn(8, 500)
    params = [SamplingParams(temperature=0) if i % 2 else SamplingParams(temperature=1.5, top_p=0.9)
              for i in range(8)]
    tokens = sample(logits, params)
    assert torch.equal(tokens[1::2], logits[1::2].argmax(dim=-1))
