"""Per-row sampling state: written once per request, gathered by row, penalties counted on the device."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from sampler_helpers import CPU, build_metadata
from torch.overrides import TorchFunctionMode

from infercore.sample import Sampler
from infercore.sample.gumbel import step_seed
from infercore.sample.row_state import SamplingRowState
from infercore.sampling_params import SamplingParams

VOCAB = 500
PARAMS = [
    SamplingParams(seed=3, temperature=0.8, top_k=50, top_p=0.9, repetition_penalty=1.1, presence_penalty=0.5),
    SamplingParams(temperature=0),
    SamplingParams(seed=5, top_p=0.7, frequency_penalty=0.4),
    SamplingParams(seed=8, min_p=0.05, logprobs=3, repetition_penalty=1.3),
    SamplingParams(seed=9, logit_bias={4: 2.0}, min_tokens=2, top_k=7),
    SamplingParams(seed=11, temperature=1.3),
]
PROMPTS = [[1, 2, 3], [4], [5, 5, 6], [7, 8], [9], [10, 11]]


def step_logits(step: int, rows: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(step)
    return (torch.randn(VOCAB, generator=g) * 2).expand(rows, -1).contiguous()


def test_gather_follows_the_rows_not_the_order_requests_joined() -> None:
    state = SamplingRowState(8, VOCAB, CPU)
    for row, p in zip([5, 2, 7], PARAMS[:3]):
        state.add(row, p, [1], [], None)
    metadata = state.gather(np.array([7, 5, 2]), np.array([0, 4, 0]))
    assert metadata.temperature is not None and metadata.seeds is not None
    assert metadata.temperature.tolist() == pytest.approx([1.0, 0.8, 0.0])
    assert metadata.seeds[0].item() == step_seed(5, 0) and metadata.seeds[1].item() == step_seed(3, 4)
    assert metadata.penalties is not None
    assert metadata.penalties.rows.tolist() == [7, 5, 2]


def test_persistent_state_samples_what_rebuilt_metadata_samples() -> None:
    """Rows added once and counted on the device give the tokens of metadata rebuilt from the
    histories every step (penalties, min_tokens, truncation and seeds alike)."""
    rows = np.array([3, 0, 5, 1, 4, 2])
    state = SamplingRowState(6, VOCAB, CPU)
    for row, p, prompt in zip(rows.tolist(), PARAMS, PROMPTS):
        state.add(row, p, prompt, [], eos_token_id=4)
    outputs: list[list[int]] = [[] for _ in PARAMS]
    for step in range(6):
        rebuilt = build_metadata(PARAMS, VOCAB, prompts=PROMPTS, outputs=outputs, eos_token_ids=[4] * len(PARAMS))
        expected = Sampler()(step_logits(step, len(PARAMS)), rebuilt).sampled_token_ids
        num_outputs = np.array([len(out) for out in outputs])
        tokens = Sampler()(step_logits(step, len(PARAMS)), state.gather(rows, num_outputs)).sampled_token_ids
        sampled_rows = [p.seed is not None or p.greedy for p in PARAMS]
        assert [t for t, keep in zip(tokens.tolist(), sampled_rows) if keep] == \
            [t for t, keep in zip(expected.tolist(), sampled_rows) if keep]
        for out, token in zip(outputs, tokens.tolist()):
            out.append(token)
    assert state.penalty_tables is not None
    counts = state.penalty_tables.output_counts[torch.from_numpy(rows)]
    assert counts.sum(dim=1).tolist() == [6.0] * len(PARAMS)


def test_a_resumed_request_keeps_its_output_counts() -> None:
    state = SamplingRowState(2, VOCAB, CPU)
    state.add(1, PARAMS[2], [5, 6], [7, 7, 9], None)
    assert state.penalty_tables is not None
    counts = state.penalty_tables.output_counts[1]
    assert counts[7].item() == 2 and counts[9].item() == 1 and counts.sum().item() == 3
    assert state.penalty_tables.prompt[1].nonzero().squeeze(1).tolist() == [5, 6]


class _NoReadsFromTheDevice(TorchFunctionMode):
    """Raise on every tensor method that hands a value to the host (the ones that wait for a GPU), and on
    boolean indexing. A function mode, not patched ``torch.Tensor`` attributes: assigning a dunder such as
    ``__getitem__`` on the class changes its type slots for good (a 0-d tensor then passes for a sequence)."""

    FORBIDDEN = {getattr(torch.Tensor, name): name for name in
                 ("item", "tolist", "cpu", "nonzero", "masked_select", "__bool__", "__int__", "__float__")}

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if func in self.FORBIDDEN:
            raise AssertionError(f"Tensor.{self.FORBIDDEN[func]} waits for the device")
        if func is torch.Tensor.__getitem__:
            index = args[1]
            parts = index if isinstance(index, tuple) else (index,)
            if any(isinstance(p, torch.Tensor) and p.dtype == torch.bool for p in parts):
                raise AssertionError("boolean indexing waits for the device")
        return func(*args, **(kwargs or {}))


@pytest.fixture
def no_reads_from_the_device() -> Iterator[None]:
    """Inside the test, any read of a tensor's value back to the host raises."""
    with _NoReadsFromTheDevice():
        yield


@pytest.mark.parametrize("params", [PARAMS, [SamplingParams(top_p=0.5, seed=1), SamplingParams(top_p=0.9)]])
def test_sampling_never_waits_for_the_device(params: list[SamplingParams], monkeypatch: pytest.MonkeyPatch,
                                             no_reads_from_the_device: None) -> None:
    """Penalties, truncation (top-p without top-k too), min-p, biases and logprobs are all queued
    without reading a device value back; only the draw itself is the device's."""
    monkeypatch.setattr(Sampler, "_gumbel_op", lambda self, device: lambda logits, t, s, threshold=None: logits.argmax(dim=-1))
    state = SamplingRowState(len(params), VOCAB, CPU)
    for row, p in enumerate(params):
        state.add(row, p, [1, 2], [3], None)
    rows = np.arange(len(params))
    out = Sampler()(step_logits(0, len(params)), state.gather(rows, np.ones(len(params), dtype=np.int64)))
    assert out.sampled_token_ids.shape == (len(params),)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7])
def test_every_gathered_field_starts_16_byte_aligned(n: int) -> None:
    """Triton specialises pointer arguments on 16-byte alignment: a field at an odd offset into the
    upload would make a step of odd batch size build a kernel variant mid-run."""
    state = SamplingRowState(8, VOCAB, CPU)
    for row in range(n):
        state.add(row, PARAMS[0], [1, 2], [], None)
    metadata = state.gather(np.arange(n), np.zeros(n, dtype=np.int64))
    fields = [metadata.temperature, metadata.seeds, metadata.min_p_margin]
    penalties = metadata.penalties
    if penalties is not None:
        fields += [penalties.repetition, penalties.presence, penalties.frequency]
    for field in fields:
        if field is not None:
            assert field.data_ptr() % 16 == 0
    assert metadata.temperature is not None and metadata.temperature.shape == (n,)
    assert torch.allclose(metadata.temperature, torch.full((n,), PARAMS[0].temperature))


def _gathered(state: SamplingRowState, rows: list[int], outputs: list[int]) -> dict[str, Any]:
    """What one gather sends (temperature, top-p and row of each sampled row, and its seed)."""
    metadata = state.gather(np.array(rows), np.array(outputs))
    assert metadata.temperature is not None and metadata.seeds is not None
    return {"temperature": metadata.temperature.tolist(), "seeds": metadata.seeds.tolist(),
            "top_p": None if metadata.top_k_top_p is None else metadata.top_k_top_p.top_p.tolist(),
            "logprobs": metadata.max_num_logprobs}


def test_repeated_gathers_of_the_same_rows_reuse_their_staging_but_not_their_seeds() -> None:
    """Steps of the same rows skip restaging their parameters (each of the two staging buffers is filled
    once), yet every step draws its own seeds, and a request joining a row is seen at once."""
    state = SamplingRowState(8, VOCAB, CPU)
    for row, p in zip([5, 2, 7], PARAMS[:3]):
        state.add(row, p, [1], [], None)
    steps = [_gathered(state, [7, 5, 2], [i, i, i]) for i in range(4)]
    assert all(step["temperature"] == steps[0]["temperature"] for step in steps)
    assert steps[0]["temperature"] == pytest.approx([1.0, 0.8, 0.0])
    assert steps[0]["top_p"] == pytest.approx([0.7, 0.9, 1.0])
    # Seeded rows (7 and 5) follow their output index; each step has new seeds.
    assert len({tuple(step["seeds"][:2]) for step in steps}) == 4
    assert steps[2]["seeds"][:2] == [step_seed(5, 2), step_seed(3, 2)]
    state.add(5, PARAMS[3], [1], [], None)  # a new request in row 5: min-p, logprobs 3, no top-p
    changed = _gathered(state, [7, 5, 2], [0, 0, 0])
    assert changed["temperature"] == pytest.approx([1.0, 1.0, 0.0])
    assert changed["logprobs"] == 3
    assert _gathered(state, [7, 2], [1, 1])["temperature"] == pytest.approx([1.0, 0.0])
