"""Every batch samples with one ``gumbel_argmax`` call: on the logits as they come without other options."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sampler_helpers import CPU, build_metadata

from infercore.ops import reference
from infercore.sample import Sampler, SamplingMetadata
from infercore.sample.gumbel import SEED_MASK, step_seed
from infercore.sampling_params import SamplingParams

VOCAB = 300


class Spy:
    """Records the arguments of each ``gumbel_argmax`` call and runs the reference; the logits it
    records are those the op draws from (below the top-k/top-p threshold: -inf)."""

    def __init__(self) -> None:
        self.calls: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        self.thresholds: list[torch.Tensor | None] = []

    def __call__(self, logits: torch.Tensor, temperature: torch.Tensor, seeds: torch.Tensor,
                 threshold: torch.Tensor | None = None) -> torch.Tensor:
        drawn = logits if threshold is None else logits.masked_fill(logits < threshold, float("-inf"))
        self.calls.append((drawn.clone(), temperature.clone(), seeds.clone()))
        self.thresholds.append(threshold)
        return reference.gumbel_argmax(logits, temperature, seeds, threshold=threshold)


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> Spy:
    recorder = Spy()
    monkeypatch.setattr(Sampler, "_gumbel_op", lambda self, device: recorder)
    return recorder


def test_bf16_logits_go_to_the_op_unconverted(spy: Spy) -> None:
    params = [SamplingParams(temperature=0.6), SamplingParams(temperature=0), SamplingParams(seed=3)]
    logits = torch.randn(3, VOCAB).bfloat16()
    tokens = Sampler()(logits, build_metadata(params, VOCAB, outputs=[[], [], [1, 2]])).sampled_token_ids
    (passed, temperature, seeds), = spy.calls
    assert passed.dtype == torch.bfloat16 and torch.equal(passed, logits)
    assert temperature.tolist() == pytest.approx([0.6, 0.0, 1.0])
    assert seeds.dtype == torch.int64 and seeds[2] == step_seed(3, 2)
    assert tokens[1] == logits[1].argmax()


def test_anything_but_temperature_works_on_float32(spy: Spy) -> None:
    params = [SamplingParams(temperature=0.6, min_p=0.2), SamplingParams(presence_penalty=1.0)]
    logits = torch.randn(2, VOCAB).bfloat16()
    Sampler()(logits, build_metadata(params, VOCAB, outputs=[[5], [5]]))
    (passed, _, _), = spy.calls
    assert passed.dtype == torch.float32
    assert passed[1, 5] < logits[1, 5].float()  # the penalty was applied before the draw
    assert passed[0].isinf().any() and not passed[1].isinf().any()  # and min-p on its row only


def test_top_k_top_p_batches_draw_through_the_op_with_their_tails_masked(spy: Spy) -> None:
    """Cut rows reach the op as a threshold below which it draws nothing, the logits unmasked; their
    neighbours' logits and seeds reach it untouched."""
    params = [SamplingParams(top_k=3, seed=1), SamplingParams(seed=2, temperature=0.7),
              SamplingParams(temperature=0), SamplingParams(top_p=0.5, temperature=2.0)]
    logits = torch.randn(4, VOCAB).bfloat16()
    tokens = Sampler()(logits.clone(), build_metadata(params, VOCAB)).sampled_token_ids
    threshold, = spy.thresholds
    assert threshold is not None and threshold.shape == (4, 1)
    assert threshold[1].item() == float("-inf") and threshold[2].item() == logits[2].max().item()
    (passed, temperature, seeds), = spy.calls
    assert temperature.tolist() == pytest.approx([1.0, 0.7, 0.0, 2.0])
    assert seeds[:2].tolist() == [step_seed(1, 0), step_seed(2, 0)]
    assert torch.equal(passed[1], logits[1].float())
    assert passed[0].isfinite().sum() == 3 and tokens[0] in logits[0].topk(3).indices
    assert tokens[2] == logits[2].argmax()
    assert 1 < passed[3].isfinite().sum() < VOCAB


def test_all_greedy_bf16_is_argmax_without_the_op(spy: Spy) -> None:
    logits = torch.randn(4, VOCAB).bfloat16()
    tokens = Sampler()(logits, build_metadata([SamplingParams(temperature=0)] * 4, VOCAB)).sampled_token_ids
    assert not spy.calls and torch.equal(tokens, logits.argmax(dim=-1))


def test_logprobs_of_bf16_logits_are_float32_of_the_raw_logits() -> None:
    logits = torch.randn(2, VOCAB).bfloat16()
    out = Sampler()(logits, build_metadata([SamplingParams(logprobs=2, temperature=0.7)] * 2, VOCAB))
    assert out.logprobs is not None and out.logprobs.logprobs.dtype == torch.float32
    expected = torch.log_softmax(logits.float(), dim=-1)
    chosen = out.sampled_token_ids
    assert torch.equal(out.logprobs.logprobs[:, 0], expected.gather(1, chosen[:, None]).squeeze(1))


def test_row_seeds_follow_the_request_seed_and_output_index() -> None:
    params = [SamplingParams(seed=42), SamplingParams(seed=-7), SamplingParams(), SamplingParams(temperature=0)]
    metadata = build_metadata(params, VOCAB, outputs=[[1] * 5, [], [], []])
    assert metadata.seeds is not None
    seeds = metadata.seeds.tolist()
    assert seeds[:2] == [step_seed(42, 5), step_seed(-7, 0)]
    assert all(0 <= s <= SEED_MASK for s in seeds)
    assert step_seed(42, 5) != step_seed(42, 6) != step_seed(43, 6)


def test_unseeded_rows_draw_fresh_seeds_from_the_seed_source() -> None:
    params = [SamplingParams()] * 4

    def seeds(source: np.random.Generator) -> list[int]:
        meta = SamplingMetadata.build(params, [[]] * 4, [[]] * 4, VOCAB, CPU, seed_source=source)
        assert meta.seeds is not None
        return meta.seeds.tolist()

    first = seeds(np.random.default_rng(5))
    assert first == seeds(np.random.default_rng(5))
    assert len(set(first)) == 4
    source = np.random.default_rng(5)
    assert seeds(source) != seeds(source)


def test_the_seed_source_comes_from_the_engine_seed() -> None:
    assert Sampler(11).seed_source.integers(1 << 62) == np.random.default_rng(11).integers(1 << 62)


def test_a_plugin_op_without_threshold_gets_masked_logits(monkeypatch: pytest.MonkeyPatch) -> None:
    """A platform's gumbel_argmax written for plugin API 1.3 (no ``threshold``) draws the same tokens:
    core masks the cut tokens itself."""
    seen: list[torch.Tensor] = []

    def old_op(logits: torch.Tensor, temperature: torch.Tensor, seeds: torch.Tensor) -> torch.Tensor:
        seen.append(logits.clone())
        return reference.gumbel_argmax(logits, temperature, seeds)

    params = [SamplingParams(top_k=3, seed=1), SamplingParams(top_p=0.5, seed=2, temperature=2.0),
              SamplingParams(seed=4)]
    logits = torch.randn(3, VOCAB)
    want = Sampler()(logits.clone(), build_metadata(params, VOCAB)).sampled_token_ids
    monkeypatch.setattr(Sampler, "_gumbel_op", lambda self, device: old_op)
    got = Sampler()(logits.clone(), build_metadata(params, VOCAB)).sampled_token_ids
    assert torch.equal(got, want)
    (drawn,) = seen
    assert drawn[0].isfinite().sum() == 3 and drawn[2].isfinite().all()
