"""Seeded requests beside every kind of neighbour: the check shared by the CPU and GPU sampler tests.

A seeded row must draw the same tokens alone and in any batch (RELIABILITY.md line 21), whichever
path its neighbours' options send the batch down. Each step gives every row the same logits, so a
row's tokens can only change if its draw depends on the batch.
"""

from __future__ import annotations

import torch

from infercore.sample import Sampler, SamplingMetadata
from infercore.sampling_params import SamplingParams

#: One request of each kind a seeded request may share its batch with.
NEIGHBOURS = {
    "plain": SamplingParams(temperature=1.0),
    "greedy": SamplingParams(temperature=0),
    "top_k": SamplingParams(temperature=0.8, top_k=20),
    "top_p": SamplingParams(temperature=0.8, top_p=0.9),
    "min_p": SamplingParams(temperature=1.1, min_p=0.05),
    "penalised": SamplingParams(repetition_penalty=1.2, presence_penalty=0.5, frequency_penalty=0.3),
}

#: The seeded requests under test, one of each kind.
SEEDED = {
    "plain": SamplingParams(seed=1234, temperature=0.8),
    "top_k": SamplingParams(seed=1234, temperature=0.8, top_k=20),
    "top_p": SamplingParams(seed=1234, temperature=0.8, top_p=0.9),
    "top_k_top_p": SamplingParams(seed=77, temperature=1.0, top_k=50, top_p=0.9),
    "min_p": SamplingParams(seed=1234, temperature=0.8, min_p=0.05),
    "penalised": SamplingParams(seed=1234, temperature=0.8, repetition_penalty=1.1, presence_penalty=0.5),
}


def step_logits(step: int, rows: int, vocab: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """The same logits for every row of a step, whatever the batch; peaked enough that top-k and
    top-p cut, flat enough that a draw has many tokens to choose from."""
    g = torch.Generator().manual_seed(1000 + step)
    row = torch.randn(vocab, generator=g) * 2.5
    return row.to(dtype).expand(rows, -1).contiguous().to(device)


def sample_steps(sampler: Sampler, params: list[SamplingParams], steps: int, vocab: int, device: torch.device,
                 dtype: torch.dtype = torch.bfloat16) -> list[list[int]]:
    """Every row's tokens over ``steps`` decode steps; each row's history feeds its penalties."""
    prompts = [[1, 2, 3] for _ in params]
    outputs: list[list[int]] = [[] for _ in params]
    for step in range(steps):
        metadata = SamplingMetadata.build(params, prompts, outputs, vocab, device,
                                          eos_token_ids=[None] * len(params))
        tokens = sampler(step_logits(step, len(params), vocab, device, dtype), metadata).sampled_token_ids
        for out, token in zip(outputs, tokens.tolist()):
            out.append(token)
    return outputs


def check_seeded_rows_ignore_their_neighbours(sampler: Sampler, vocab: int, device: torch.device,
                                              steps: int = 3) -> None:
    """Every seeded kind draws the tokens it draws alone beside neighbours that keep the logits in the
    model's dtype, beside neighbours that need float32 logits, and amid every kind (top-k and top-p
    among them, with the other seeded kinds as neighbours too)."""
    alone = {kind: sample_steps(sampler, [seeded], steps, vocab, device)[0] for kind, seeded in SEEDED.items()}
    for kind, tokens in alone.items():
        assert len(set(tokens)) > 1, f"seeded {kind} drew one token every step: the check could not fail"
    for names in (("plain", "greedy"), ("min_p", "penalised")):
        for kind, seeded in SEEDED.items():
            batch = [NEIGHBOURS[names[0]], seeded, NEIGHBOURS[names[1]]]
            assert sample_steps(sampler, batch, steps, vocab, device)[1] == alone[kind], \
                f"seeded {kind} request beside {names[0]} and {names[1]} neighbours"
    everyone = list(NEIGHBOURS.values())
    batch = everyone[:3] + list(SEEDED.values()) + everyone[3:]
    amid = sample_steps(sampler, batch, steps, vocab, device)[3: 3 + len(SEEDED)]
    for (kind, tokens), got in zip(alone.items(), amid):
        assert got == tokens, f"seeded {kind} request amid every kind of neighbour"
    other_seed = sample_steps(sampler, [SEEDED["plain"].clone(seed=4321)], steps, vocab, device)[0]
    assert other_seed != alone["plain"]
