"""The Triton ``gumbel_argmax`` and the sampler on the GPU at the serving shape (256 rows, 151936 tokens)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gpu_marks import requires_gpu
from gumbel_cases import (
    check_follows_softmax,
    check_greedy_is_argmax,
    check_only_finite_tokens,
    check_same_seed_same_token,
)
from seeded_batch_cases import check_seeded_rows_ignore_their_neighbours, sample_steps

from infercore.ops import reference
from infercore.sample import Sampler
from infercore.sample.row_state import SamplingRowState
from infercore.sampling_params import SamplingParams
from infercore_triton.sampling import gumbel_argmax
from infercore_triton.sampling_penalties import apply_penalties

pytestmark = requires_gpu
BATCH, VOCAB = 256, 151936


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_greedy_rows_are_torch_argmax(dtype: torch.dtype) -> None:
    check_greedy_is_argmax(gumbel_argmax, BATCH, VOCAB, dtype, "cuda")


def test_same_seed_same_token_in_any_batch() -> None:
    check_same_seed_same_token(gumbel_argmax, BATCH, VOCAB, torch.bfloat16, "cuda")


def test_only_finite_logits_are_drawn() -> None:
    check_only_finite_tokens(gumbel_argmax, BATCH, VOCAB, torch.bfloat16, "cuda")


def test_small_vocabulary_follows_the_tempered_softmax() -> None:
    check_follows_softmax(gumbel_argmax, 200_000, "cuda")


def test_full_vocabulary_follows_the_tempered_softmax() -> None:
    """Eight live tokens spread over the vocabulary's blocks (first, last, block edges), bf16 rows."""
    support = [0, 2047, 2048, 40_000, 75_001, 100_000, 149_503, VOCAB - 1]
    check_follows_softmax(gumbel_argmax, 8192, "cuda", torch.bfloat16, VOCAB, support)


def test_mixed_batch_of_serving_shape() -> None:
    """Half greedy, half at temperature 0.6: greedy rows are argmax, sampled rows stay near the top."""
    g = torch.Generator(device="cuda").manual_seed(0)
    logits = (torch.randn(BATCH, VOCAB, device="cuda", generator=g) * 3).bfloat16()
    temperature = torch.tensor([0.0, 0.6] * (BATCH // 2), device="cuda")
    seeds = torch.randint(0, 2**63 - 1, (BATCH,), device="cuda", generator=g)
    tokens = gumbel_argmax(logits, temperature, seeds)
    assert tokens.dtype == torch.int64 and tokens.shape == (BATCH,)
    assert torch.equal(tokens[::2], logits[::2].argmax(dim=-1))
    assert ((tokens >= 0) & (tokens < VOCAB)).all()
    assert not torch.equal(tokens[1::2], logits[1::2].argmax(dim=-1))


def test_seeded_requests_draw_alike_alone_and_beside_any_neighbour() -> None:
    """Plain, greedy, top-k, top-p, min-p and penalised neighbours leave a seeded request's tokens as
    they are alone (RELIABILITY.md line 21), through the platform's own sampler op."""
    check_seeded_rows_ignore_their_neighbours(Sampler(), VOCAB, torch.device("cuda"), steps=6)


def test_a_full_batch_of_seeded_requests_draws_as_each_would_alone() -> None:
    """256 seeded rows, half with the w-gpu-sampling options, half plain: each row as it draws alone."""
    params = [SamplingParams(seed=row, top_p=0.9, top_k=50, repetition_penalty=1.1, presence_penalty=0.5)
              if row % 2 else SamplingParams(seed=row, temperature=0.8) for row in range(BATCH)]
    sampler, device = Sampler(), torch.device("cuda")
    batch = sample_steps(sampler, params, 3, VOCAB, device)
    alone = [sample_steps(sampler, [p], 3, VOCAB, device)[0] for p in params]
    assert batch == alone
    assert len({tuple(tokens) for tokens in alone}) > BATCH // 2


def test_sampling_options_never_wait_for_the_device() -> None:
    """Penalties, top-k and top-p (top-p alone too), min-p, biases and logprobs at the serving shape,
    from the runner's per-row state: the step is queued without one device-to-host sync."""
    options = [SamplingParams(seed=1, top_p=0.9, top_k=50, repetition_penalty=1.1, presence_penalty=0.5),
               SamplingParams(top_p=0.8), SamplingParams(min_p=0.1, logprobs=5), SamplingParams(temperature=0),
               SamplingParams(logit_bias={7: 1.0}, min_tokens=4, frequency_penalty=0.2)]
    device = torch.device("cuda")
    state = SamplingRowState(BATCH, VOCAB, device, pin_memory=True)
    for row in range(BATCH):
        state.add(row, options[row % len(options)], list(range(row, row + 100)), [], eos_token_id=2)
    sampler, rows = Sampler(), np.arange(BATCH)
    logits = (torch.randn(BATCH, VOCAB, device=device) * 3).bfloat16()
    sampler(logits.clone(), state.gather(rows, np.zeros(BATCH, dtype=np.int64)))
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for step in range(1, 4):
            out = sampler(logits.clone(), state.gather(rows, np.full(BATCH, step, dtype=np.int64)))
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert out.sampled_token_ids.shape == (BATCH,) and out.logprobs is not None
    assert state.penalty_tables is not None
    # Four steps, each counted on the device in every row of the batch.
    assert torch.equal(state.penalty_tables.output_counts.sum(dim=1), torch.full((BATCH,), 4, device=device))


def test_sampling_options_build_no_kernel_variants_mid_run(tiny_model_factory) -> None:
    """Start-up builds the float32 draw that top-k, top-p, min-p and penalties send logits through, and
    the penalty kernel; a draw without a top-k/top-p threshold runs the same variant as one with it."""
    from infercore import LLM
    from infercore.jit_builds import JitBuildCounter

    llm = LLM(model=str(tiny_model_factory("Qwen3ForCausalLM")), dtype="bfloat16", max_model_len=256,
              gpu_memory_utilization=0.3)
    params = [SamplingParams(seed=i, top_p=0.9, top_k=50, repetition_penalty=1.1, presence_penalty=0.5,
                             max_tokens=8, ignore_eos=True) for i in range(4)]
    params += [SamplingParams(seed=i, temperature=0.7, max_tokens=8, ignore_eos=True) for i in range(2)]
    with JitBuildCounter() as builds:
        outs = llm.generate([{"prompt_token_ids": [1, 2, 3 + i]} for i in range(6)], params, use_tqdm=False)
    assert [len(o.outputs[0].token_ids) for o in outs] == [8] * 6
    assert dict(builds.builds) == {}


def test_penalty_kernel_is_bit_identical_to_the_reference_at_serving_shape() -> None:
    """One pass of the kernel gives the reference's bits: IEEE division, no fused multiply-add."""
    g = torch.Generator(device="cuda").manual_seed(3)
    logits = torch.randn(BATCH, VOCAB, device="cuda", generator=g) * 4
    table_rows = BATCH + 8
    prompt = torch.rand(table_rows, VOCAB, device="cuda", generator=g) < 0.01
    counts = torch.randint(0, 5, (table_rows, VOCAB), device="cuda", generator=g, dtype=torch.int32)
    counts *= torch.rand(table_rows, VOCAB, device="cuda", generator=g) < 0.01
    rows = torch.randperm(table_rows, device="cuda", generator=g)[:BATCH]
    repetition = torch.rand(BATCH, 1, device="cuda", generator=g) + 0.5
    presence = torch.randn(BATCH, 1, device="cuda", generator=g)
    frequency = torch.randn(BATCH, 1, device="cuda", generator=g)
    args = (rows, prompt, counts, repetition, presence, frequency)
    expected = reference.apply_penalties(logits.clone(), *args)
    got = apply_penalties(logits.clone(), *args)
    assert torch.equal(got.view(torch.int32), expected.view(torch.int32))
    assert not torch.equal(got, logits)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_a_threshold_draws_what_a_mask_draws_at_serving_shape(dtype: torch.dtype) -> None:
    g = torch.Generator(device="cuda").manual_seed(4)
    logits = (torch.randn(BATCH, VOCAB, device="cuda", generator=g) * 3).to(dtype)
    threshold = logits.topk(50, dim=-1).values[:, -1:]
    threshold[::3] = float("-inf")
    temperature = torch.tensor([0.0, 0.9, 1.3, 0.6] * (BATCH // 4), device="cuda")
    seeds = torch.randint(0, 2**63 - 1, (BATCH,), device="cuda", generator=g)
    masked = logits.masked_fill(logits < threshold, float("-inf"))
    assert torch.equal(gumbel_argmax(logits, temperature, seeds, threshold=threshold),
                       gumbel_argmax(masked, temperature, seeds))


def test_block_top_values_are_torch_topk_values_at_serving_shape() -> None:
    from infercore.sample.truncation import top_values

    logits = torch.randn((BATCH, VOCAB), device="cuda")
    logits[0, ::1001] = 9.0  # ties spread over blocks
    for width in (1, 50, 1024):
        assert torch.equal(top_values(logits, width), logits.topk(width, dim=-1).values)
