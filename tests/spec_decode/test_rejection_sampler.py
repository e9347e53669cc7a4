"""The rejection sampler: sampled rows keep the target's distribution exactly, greedy rows accept
exactly the drafts greedy decoding would produce, and seeded rows ignore their neighbours."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from verify_helpers import CPU, target_distribution, total_variation, verify

from infercore.sample import Sampler, SamplingMetadata
from infercore.sampling_params import SamplingParams
from infercore.spec_decode.rejection_sampler import RejectionSampler

VOCAB = 12
ROWS = 100_000
#: Bound on the total-variation distance between 10^5 draws and the target distribution. The
#: empirical distance of exact draws over 12 tokens is about 0.004 (sum of sqrt(2 p (1 - p) / (pi N)) / 2);
#: a sampler that kept the draft's distribution, or skipped the residual, is off by 0.1 or more here.
TV_BOUND = 0.01
PARAMS = SamplingParams(temperature=0.8, top_k=8, top_p=0.9)


def _target_logits() -> torch.Tensor:
    return torch.tensor([2.0, 1.2, -0.5, 0.9, 0.1, -1.0, 1.6, 0.4, -2.0, 0.0, 0.7, -0.3])


def _drafts_from(q: torch.Tensor, rows: int, width: int) -> torch.Tensor:
    """[rows, width] draft tokens, each drawn from ``q`` [V]."""
    return torch.multinomial(q.expand(rows * width, -1), 1, replacement=True).view(rows, width)


def _draft_distributions() -> dict[str, torch.Tensor]:
    p = target_distribution(_target_logits(), PARAMS.temperature, PARAMS.top_k, PARAMS.top_p).float()
    good = (p + 0.02) / (p + 0.02).sum()  # close to p, with a little mass on tokens p forbids
    bad = torch.softmax(-_target_logits(), dim=-1)  # the target's order reversed
    adversarial = torch.where(p == 0, 1.0, 0.0)  # all mass where p is 0
    return {"good": good, "bad": bad, "adversarial": adversarial / adversarial.sum()}


@pytest.mark.parametrize("draft", ["good", "bad", "adversarial"])
def test_sampled_tokens_follow_the_target_whatever_the_draft_model(draft: str) -> None:
    q = _draft_distributions()[draft]
    drafts = _drafts_from(q, ROWS, 2)
    logits = _target_logits().repeat(3 * ROWS, 1)
    out = verify(logits, [PARAMS] * ROWS, drafts.tolist(), draft_probs=q.expand(ROWS, 2, VOCAB))
    expected = target_distribution(_target_logits(), PARAMS.temperature, PARAMS.top_k, PARAMS.top_p)
    assert total_variation(out.token_ids[:, 0], expected) <= TV_BOUND
    if draft == "adversarial":
        assert int(out.num_tokens.max()) == 1  # a draft the target forbids is never accepted
        return
    # The token after an accepted draft is again a draw from the target (the same logits at every position).
    second = out.token_ids[out.num_tokens >= 2, 1]
    assert len(second) > 10_000 and total_variation(second, expected) <= 2 * TV_BOUND


@pytest.mark.parametrize("draft_token", [0, 6, 11])
def test_ngram_point_mass_drafts_keep_the_target(draft_token: int) -> None:
    """An n-gram draft is certain (q is a point mass): the residual is the target without the draft."""
    drafts = [[draft_token, draft_token]] * ROWS
    out = verify(_target_logits().repeat(3 * ROWS, 1), [PARAMS] * ROWS, drafts)
    expected = target_distribution(_target_logits(), PARAMS.temperature, PARAMS.top_k, PARAMS.top_p)
    assert total_variation(out.token_ids[:, 0], expected) <= TV_BOUND
    accepted_first = float((out.num_tokens >= 2).double().mean())
    assert abs(accepted_first - float(expected[draft_token])) < 0.01  # accepted with probability p(d)


def test_min_p_is_part_of_the_target() -> None:
    params = SamplingParams(temperature=1.3, top_k=10, top_p=0.95, min_p=0.2)
    expected = target_distribution(_target_logits(), 1.3, 10, 0.95, min_p=0.2)
    assert 0 < int((expected > 0).sum()) < 10  # min-p removes tokens top-k and top-p keep
    q = torch.full((VOCAB,), 1.0 / VOCAB)
    drafts = _drafts_from(q, ROWS, 1)
    out = verify(_target_logits().repeat(2 * ROWS, 1), [params] * ROWS, drafts.tolist(),
                 draft_probs=q.expand(ROWS, 1, VOCAB))
    assert total_variation(out.token_ids[:, 0], expected) <= TV_BOUND


def test_rows_without_drafts_sample_what_the_sampler_samples() -> None:
    """The target distribution is the sampler's own: with no drafts, each row's token is the one
    ``Sampler`` draws from the same logits, parameters and seed."""
    params = [SamplingParams(temperature=0), SamplingParams(temperature=0.7, seed=5),
              SamplingParams(temperature=1.2, top_k=4, seed=6), SamplingParams(temperature=0.9, top_p=0.6, seed=7),
              SamplingParams(temperature=1.0, min_p=0.1, seed=8),
              SamplingParams(temperature=0.8, presence_penalty=1.0, seed=9)]
    outputs = [[1, 2], [3], [], [4, 4], [5], [6, 7]]
    logits = torch.randn(len(params), VOCAB) * 2
    out = verify(logits, params, [[] for _ in params], outputs=outputs)
    metadata = SamplingMetadata.build(params, [[] for _ in params], outputs, VOCAB, CPU)
    assert out.token_ids[:, 0].tolist() == Sampler()(logits.clone(), metadata).sampled_token_ids.tolist()


def test_greedy_rows_accept_the_matching_prefix_then_take_the_argmax() -> None:
    argmax = [[3, 5, 7, 1, 2], [4, 4, 4, 4, 4], [9, 8, 7, 6, 5], [0, 1, 2, 3, 4]]
    drafts = [[3, 5, 0, 1], [4, 4, 4, 4], [1, 8], []]
    logits = []
    for row, tokens in enumerate(argmax):
        for j in range(len(drafts[row]) + 1):
            position = torch.randn(VOCAB)
            position[tokens[j]] = 10.0
            logits.append(position)
    out = verify(torch.stack(logits), [SamplingParams(temperature=0)] * 4, drafts)
    assert out.num_tokens.tolist() == [3, 5, 1, 1]
    assert out.token_ids.tolist() == [[3, 5, 7, -1, -1], [4, 4, 4, 4, 4], [9, -1, -1, -1, -1],
                                      [0, -1, -1, -1, -1]]


def test_greedy_verification_equals_greedy_decoding_with_penalties() -> None:
    """Position j's penalties count the drafts before it, as decoding token by token would."""
    params = SamplingParams(temperature=0, repetition_penalty=2.0)
    row = torch.randn(VOCAB) * 0.1
    row[5], row[6] = 3.0, 2.0
    decoded: list[int] = []
    for _ in range(3):
        metadata = SamplingMetadata.build([params], [[1, 2]], [list(decoded)], VOCAB, CPU)
        decoded.append(int(Sampler()(row.clone().unsqueeze(0), metadata).sampled_token_ids[0]))
    assert decoded[:2] == [5, 6]
    drafts = [decoded[:2], [5, 5]]
    out = verify(row.repeat(6, 1), [params, params], drafts)
    assert out.token_ids[0].tolist() == decoded
    assert out.token_ids[1].tolist()[:2] == [5, 6]  # the repeated 5 is penalised away at position 1


def test_a_seeded_row_gives_the_same_tokens_beside_any_neighbours() -> None:
    seeded = SamplingParams(temperature=1.0, seed=42)
    logits = torch.randn(4, VOCAB)
    drafts = [3, 3, 7]

    def tokens_of_seeded_row(neighbours: int, seed: int) -> list[int]:
        params = [SamplingParams(temperature=0.7)] * neighbours + [seeded]
        rows = [torch.randn(3, VOCAB) for _ in range(neighbours)] + [logits]
        row_drafts = [[1, 2]] * neighbours + [drafts]
        out = verify(torch.cat(rows), params, row_drafts, seed=seed)
        return out.token_ids[-1, : int(out.num_tokens[-1])].tolist()

    runs = [tokens_of_seeded_row(n, seed) for n, seed in ((0, 0), (3, 1), (7, 2))]
    assert runs[0] == runs[1] == runs[2]
    different = {tuple(tokens_of_seeded_row(0, 0)) for _ in range(2)}
    assert len(different) == 1


def test_unseeded_rows_differ_between_calls() -> None:
    logits = torch.zeros(2 * 64, VOCAB)
    params = [SamplingParams(temperature=1.0)] * 64
    first = verify(logits, params, [[0]] * 64, seed=1).token_ids
    second = verify(logits, params, [[0]] * 64, seed=2).token_ids
    assert not torch.equal(first, second)


@pytest.mark.parametrize("rate", [0.0, 0.3, 0.7, 1.0])
def test_benchmark_acceptance_rate_accepts_each_draft_with_that_probability(rate: float) -> None:
    rows, width = 20_000, 4
    logits = torch.zeros(rows * (width + 1), VOCAB)
    logits[:, 0] = -float("inf")  # the target forbids every draft: only the forced rate accepts any
    sampler = RejectionSampler(benchmark_acceptance_rate=rate)
    params = [SamplingParams(temperature=1.0)] * (rows // 2) + [SamplingParams(temperature=0)] * (rows // 2)
    out = verify(logits, params, [[0] * width] * rows, sampler=sampler)
    expected = sum(rate ** j for j in range(1, width + 1))  # E[accepted] of a walk stopped at K drafts
    assert abs(float((out.num_tokens - 1).double().mean()) - expected) < 0.03 * max(expected, 1.0)


@pytest.mark.parametrize("rate", [None, 0.0, 0.6, 1.0])
def test_all_greedy_rows_verify_as_the_general_path_does(rate: float | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows all greedy with point-mass drafts take the short path; the same tokens as the general path (run
    here by passing the drafts' one-hot distributions) for drafts that match, partly match or miss, and at
    the benchmark's forced rates."""
    generator = torch.Generator().manual_seed(7)
    drafts = [[int(t) for t in torch.randint(0, VOCAB, (n,), generator=generator)] for n in (4, 4, 2, 0, 3, 1)]
    logits = torch.randn(sum(len(d) + 1 for d in drafts), VOCAB, generator=generator)
    at = 0
    for row, tokens in enumerate(drafts):  # rows 0 and 4: the target agrees with every draft; others at random
        for j, token in enumerate(tokens):
            if row in (0, 4) or j == 0:
                logits[at + j, token] = 10.0
        at += len(tokens) + 1
    params = [SamplingParams(temperature=0)] * len(drafts)
    width = max(len(d) for d in drafts)
    one_hot = torch.zeros(len(drafts), width, VOCAB)
    for row, tokens in enumerate(drafts):
        for j, token in enumerate(tokens):
            one_hot[row, j, token] = 1.0
    short_paths: list[int] = []
    original = RejectionSampler._verify_all_greedy

    def counted(self: RejectionSampler, *args: object) -> object:
        short_paths.append(1)
        return original(self, *args)

    monkeypatch.setattr(RejectionSampler, "_verify_all_greedy", counted)
    torch.manual_seed(3)
    short = verify(logits, params, drafts, sampler=RejectionSampler(benchmark_acceptance_rate=rate))
    assert short_paths == [1]
    torch.manual_seed(3)
    general = verify(logits, params, drafts, draft_probs=one_hot, sampler=RejectionSampler(benchmark_acceptance_rate=rate))
    assert short_paths == [1]  # the one-hot distributions took the general path
    assert short.num_tokens.tolist() == general.num_tokens.tolist()
    assert short.token_ids.tolist() == general.token_ids.tolist()
    if rate is None:
        assert short.num_tokens.tolist()[0] == 5 and short.num_tokens.tolist()[4] == 4


def test_benchmark_acceptance_rate_is_checked() -> None:
    with pytest.raises(ValueError, match="benchmark_acceptance_rate"):
        RejectionSampler(benchmark_acceptance_rate=1.5)


def test_logits_rows_must_match_the_drafts() -> None:
    metadata = SamplingMetadata.build([SamplingParams(temperature=0)] * 3, [[]] * 3, [[]] * 3, VOCAB, CPU)
    with pytest.raises(ValueError, match="sum"):
        RejectionSampler().verify(torch.zeros(3, VOCAB), metadata, torch.zeros(1, 1, dtype=torch.int64),
                                  np.array([1]))
