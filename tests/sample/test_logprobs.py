import torch
from sampler_helpers import build_metadata

from infercore.sample import LogprobsTensors, Sampler, compute_prompt_logprobs
from infercore.sample.logprobs import gather_logprobs
from infercore.sampling_params import SamplingParams
from infercore.wire.messages import Logprobs

VOCAB = 500


def check_row(lp: Logprobs, raw: torch.Tensor, chosen: int, k: int) -> None:
    expected = torch.log_softmax(raw, dim=-1)
    assert lp.token_ids[0][0] == chosen and len(lp.token_ids[0]) == 1 + k
    assert torch.allclose(torch.tensor(lp.logprobs[0]), expected[lp.token_ids[0]], atol=1e-5)
    assert lp.token_ids[0][1:] == expected.topk(k).indices.tolist()
    assert lp.ranks[0] == int((expected > expected[chosen]).sum()) + 1


def test_logprobs_are_the_raw_model_distribution_with_ranks() -> None:
    params = [
        SamplingParams(logprobs=3, temperature=0.5, top_k=20, presence_penalty=2.0),
        SamplingParams(logprobs=0, logit_bias={7: 100.0}),
        SamplingParams(temperature=0, logprobs=5, repetition_penalty=2.0),
        SamplingParams(),
    ]
    raw = torch.randn(len(params), VOCAB) * 3
    metadata = build_metadata(params, VOCAB, prompts=[[1, 2]] * 4, outputs=[[3, int(raw[2].argmax())]] * 4)
    out = Sampler()(raw.clone(), metadata)
    assert out.logprobs is not None and out.logprobs.token_ids.shape == (4, 6)
    tokens = out.sampled_token_ids.tolist()
    assert tokens[1] == 7 and int((torch.log_softmax(raw[1], -1) > torch.log_softmax(raw[1], -1)[7]).sum()) > 0
    for row, k in ((0, 3), (1, 0), (2, 5)):
        check_row(out.logprobs.cpu().to_logprobs(row, k), raw[row], tokens[row], k)


def test_no_logprobs_requested_returns_none() -> None:
    out = Sampler()(torch.randn(2, VOCAB), build_metadata([SamplingParams()] * 2, VOCAB))
    assert out.logprobs is None


def test_whole_vocabulary_logprobs() -> None:
    raw = torch.randn(1, VOCAB)
    out = Sampler()(raw.clone(), build_metadata([SamplingParams(logprobs=-1)], VOCAB))
    assert out.logprobs is not None
    lp = out.logprobs.to_logprobs(0, -1)
    assert len(lp.token_ids[0]) == 1 + VOCAB
    check_row(lp, raw[0], int(out.sampled_token_ids[0]), VOCAB)


def test_rank_counts_strictly_more_likely_tokens() -> None:
    logprobs = torch.log_softmax(torch.tensor([[1.0, 3.0, 3.0, 0.0]]), dim=-1)
    result: LogprobsTensors = gather_logprobs(logprobs, torch.tensor([0]), 2)
    assert result.ranks.tolist() == [3]
    assert gather_logprobs(logprobs, torch.tensor([2]), 2).ranks.tolist() == [1]


def test_prompt_logprobs() -> None:
    logits = torch.randn(6, VOCAB)
    targets = torch.randint(0, VOCAB, (6,))
    lp = compute_prompt_logprobs(logits, targets, 2)
    expected = torch.log_softmax(logits, dim=-1)
    assert len(lp.token_ids) == 6 and lp.ranks == [int((expected[i] > expected[i, t]).sum()) + 1
                                                  for i, t in enumerate(targets.tolist())]
    for i, t in enumerate(targets.tolist()):
        assert lp.token_ids[i][0] == t and lp.token_ids[i][1:] == expected[i].topk(2).indices.tolist()
        assert torch.allclose(torch.tensor(lp.logprobs[i]), expected[i, lp.token_ids[i]], atol=1e-5)
    assert compute_prompt_logprobs(logits, targets, 0).token_ids == [[t] for t in targets.tolist()]
