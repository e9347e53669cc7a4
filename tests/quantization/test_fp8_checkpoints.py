"""FP8 checkpoints written here (HF ``fp8`` block scales; compressed-tensors per channel and per tensor)
load and run on the CPU like their dequantized float32 twins.

Two comparisons, each against the same engine running the twin (the checkpoint's FP8 weights times
their scales, saved unquantized in float32):

* **Weights exactly**: with activation quantization switched off (its functions replaced by the
  identity), the FP8 model computes ``x @ (q * s)^T``, the twin's product: greedy tokens identical
  for 32 steps and every logprob within 1e-4. This pins down the loading: scales, fused q/k/v and
  gate/up shards, block layout, the ignore lists.
* **W8A8 as shipped**: activations quantized per token (per 32-column group for block scales), as
  the GPU kernels do. Teacher-forced on the twin's greedy outputs (202 positions), the largest
  logprob difference stays under 0.25 and the top token agrees at 80% of positions or more (measured:
  0.14-0.18 and 86-88%; e4m3 keeps 3 mantissa bits and this random tiny model's top tokens are close).
"""

from __future__ import annotations

import pytest
import torch

from infercore import LLM, SamplingParams
from infercore.ops import fp8_math

SCHEMES = ["block", "channel", "tensor"]
PROMPTS = ["hello", "The engine cache block request server stream json tool call",
           "def add(a, b):\n    return a + b", " ".join(["the model of the token"] * 6)]
ENGINE = {"dtype": "float32", "max_model_len": 256, "num_gpu_blocks_override": 64, "max_num_seqs": 8,
          "cpu_threads": 1}
MAX_TOKENS = 32
EXACT_BOUND = 1e-4
W8A8_BOUND = 0.25
W8A8_TOP1_AGREEMENT = 0.8


def _identity_per_token(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x.float(), torch.ones(x.shape[0], 1)


def _identity_per_group(x: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    return x.float(), torch.ones(x.shape[0], -(-x.shape[1] // group))


def _generate(folder, prompts, **params):
    llm = LLM(model=str(folder), **ENGINE)
    return llm.generate(prompts, SamplingParams(temperature=0, ignore_eos=True, **params), use_tqdm=False)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_fp8_weights_load_exactly(fp8_pair, monkeypatch: pytest.MonkeyPatch, scheme: str) -> None:
    quantized, twin = fp8_pair(scheme)
    monkeypatch.setattr(fp8_math, "quantize_per_token", _identity_per_token)
    monkeypatch.setattr(fp8_math, "quantize_per_group", _identity_per_group)
    ours = _generate(quantized, PROMPTS, max_tokens=MAX_TOKENS, logprobs=3)
    ref = _generate(twin, PROMPTS, max_tokens=MAX_TOKENS, logprobs=3)
    for a, b in zip(ours, ref):
        assert a.outputs[0].token_ids == b.outputs[0].token_ids, f"{scheme}: prompt {a.prompt!r}"
        for step, (pa, pb) in enumerate(zip(a.outputs[0].logprobs, b.outputs[0].logprobs)):
            for token, lp in pa.items():
                assert abs(lp.logprob - pb[token].logprob) < EXACT_BOUND, f"{scheme}: {a.prompt!r} step {step}"


@pytest.mark.parametrize("scheme", SCHEMES)
def test_fp8_w8a8_stays_close_to_its_dequantized_twin(fp8_pair, scheme: str) -> None:
    quantized, twin = fp8_pair(scheme)
    ref = _generate(twin, PROMPTS, max_tokens=MAX_TOKENS)
    forced = [{"prompt_token_ids": r.prompt_token_ids + r.outputs[0].token_ids} for r in ref]
    ours = _generate(quantized, forced, max_tokens=1, prompt_logprobs=1)
    theirs = _generate(twin, forced, max_tokens=1, prompt_logprobs=1)
    worst, agree, positions = 0.0, 0, 0
    for a, b in zip(ours, theirs):
        ids = a.prompt_token_ids
        for pos in range(1, len(ids)):
            pa, pb = a.prompt_logprobs[pos], b.prompt_logprobs[pos]
            worst = max(worst, abs(pa[ids[pos]].logprob - pb[ids[pos]].logprob))
            top_a = min(pa, key=lambda t: pa[t].rank)
            top_b = min(pb, key=lambda t: pb[t].rank)
            agree += top_a == top_b
            positions += 1
    assert worst < W8A8_BOUND, f"{scheme}: teacher-forced logprobs differ by up to {worst:.3f}"
    assert agree / positions >= W8A8_TOP1_AGREEMENT, f"{scheme}: top tokens agree at {agree}/{positions}"
