import pytest
import torch
from sampler_helpers import build_metadata, sample

from infercore.ops import reference as reference_ops
from infercore.sample import Sampler
from infercore.sampling_params import SamplingParams

VOCAB = 64


def reference(logits: torch.Tensor, p: SamplingParams, prompt: list[int], output: list[int]) -> torch.Tensor:
    """vLLM's penalties, one token at a time."""
    out = logits.clone()
    for token in set(prompt) | set(output):
        value = out[token]
        out[token] = value / p.repetition_penalty if value > 0 else value * p.repetition_penalty
    for token in set(output):
        out[token] -= p.frequency_penalty * output.count(token) + p.presence_penalty
    return out


MIXED = [
    SamplingParams(presence_penalty=0.7),
    SamplingParams(),
    SamplingParams(frequency_penalty=0.3),
    SamplingParams(repetition_penalty=1.4),
    SamplingParams(repetition_penalty=0.8, presence_penalty=-0.5, frequency_penalty=1.1),
    SamplingParams(temperature=0),
]
REPETITION_ONLY = [SamplingParams(repetition_penalty=1.0 + i / 10) for i in range(6)]


@pytest.mark.parametrize("params", [MIXED, REPETITION_ONLY])
def test_penalties_match_the_reference_row_by_row(params: list[SamplingParams]) -> None:
    prompts = [[1, 2, 3], [4, 5], [6, 7, 7], [8, 9, 10, 11], [1, 12], [13]]
    outputs = [[3, 3, 20], [4, 4], [7, 7, 7, 30], [9, 40, 40], [12, 12, 50, 1], []]
    logits = torch.randn(len(params), VOCAB) * 3
    metadata = build_metadata(params, VOCAB, prompts=prompts, outputs=outputs)
    assert metadata.penalties is not None
    penalised = logits.clone()
    metadata.penalties.apply(penalised)
    for i, p in enumerate(params):
        expected = reference(logits[i], p, prompts[i], outputs[i])
        assert torch.allclose(penalised[i], expected, atol=1e-6), f"row {i}"
    changed = [i for i, p in enumerate(params) if p.presence_penalty or p.frequency_penalty
               or p.repetition_penalty != 1]
    assert all(not torch.equal(penalised[i], logits[i]) for i in changed)


def test_presence_penalty_applies_to_output_not_prompt() -> None:
    logits = torch.zeros(1, VOCAB)
    logits[0, 5] = 1.0
    logits[0, 6] = 0.9
    params = [SamplingParams(temperature=0, presence_penalty=2.0)]
    assert sample(logits, params, prompts=[[5]], outputs=[[]]).item() == 5
    assert sample(logits, params, prompts=[[]], outputs=[[5]]).item() == 6


def test_no_penalty_builds_no_tables() -> None:
    assert build_metadata([SamplingParams()] * 3, VOCAB, outputs=[[1], [2], [3]]).penalties is None


def test_penalties_are_one_op_call_reading_the_tables_by_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sampler hands the whole batch to one ``apply_penalties`` call: float32 logits, the rows'
    table indices and the int32 output counts, with no per-step copy of the tables."""
    calls: list[tuple[torch.Tensor, ...]] = []

    def spy(logits: torch.Tensor, *args: torch.Tensor) -> torch.Tensor:
        calls.append((logits, *args))
        return reference_ops.apply_penalties(logits, *args)

    ops = {"apply_penalties": spy, "gumbel_argmax": reference_ops.gumbel_argmax}
    monkeypatch.setattr(Sampler, "_op", lambda self, name, device: ops[name])
    params = [SamplingParams(temperature=0, repetition_penalty=1.5), SamplingParams(temperature=0)]
    metadata = build_metadata(params, VOCAB, prompts=[[5], [6]], outputs=[[7, 7], []])
    logits = torch.zeros(2, VOCAB)
    logits[:, 5] = 1.2
    logits[:, 6] = 1.0
    assert Sampler()(logits.clone(), metadata).sampled_token_ids.tolist() == [6, 5]
    (passed, rows, prompt, counts, *_), = calls
    assert passed.dtype == torch.float32 and rows.tolist() == [0, 1]
    assert counts.dtype == torch.int32 and counts[0, 7].item() == 2
    assert prompt.dtype == torch.bool and prompt[0, 5]
    assert metadata.penalties is not None and counts.data_ptr() == metadata.penalties.tables.output_counts.data_ptr()


def test_unpenalised_rows_keep_their_logits_bit_for_bit() -> None:
    """Neutral penalties beside penalised rows change no bit, -0.0 and -inf included."""
    params = [SamplingParams(), SamplingParams(presence_penalty=-0.5, frequency_penalty=-0.2)]
    metadata = build_metadata(params, VOCAB, prompts=[[0, 1, 2], [0]], outputs=[[0, 1, 2, 2], [0]])
    assert metadata.penalties is not None
    logits = torch.randn(2, VOCAB)
    logits[:, :3] = torch.tensor([-0.0, float("-inf"), 2.5])
    penalised = logits.clone()
    metadata.penalties.apply(penalised)
    assert torch.equal(penalised[0].view(torch.int32), logits[0].view(torch.int32))
    assert penalised[1, 0].item() == pytest.approx(0.7)  # -0.0 seen once: minus (-0.2 * 1 - 0.5)
