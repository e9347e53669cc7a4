"""A tiny Qwen3-MoE checkpoint in the HF ``fp8`` block format (the Qwen3-30B-A3B-FP8 layout) loads and runs
on the CPU like its dequantized float32 twin, and ``--quantization fp8`` quantizes an unquantized MoE's
experts as they load.

* **Weights exactly**: with activation quantization switched off (``quantize_per_group`` replaced by the
  identity, in the experts' op and the attention linears alike), the FP8 model computes with ``q * s``,
  the twin's weights: greedy tokens identical for 24 steps and every logprob within 1e-4. This pins
  down the loading: per-expert gate/up/down tensors and their block scales into ``w13``/``w2``, gate and
  up each with block rows of their own (48 intermediate features: a partial block each). The same holds
  for ``--quantization fp8`` on the float32 model against its weights dequantized from 128x128 blocks.
* **W8A8 as shipped**: activations quantized per token and 32-column group. Teacher-forced on the twin's
  greedy outputs (123 positions), the mean logprob difference stays under 0.1, the largest under 0.75 and
  the top token agrees at 80% of positions or more (measured: mean 0.048, p99 0.22, max 0.51, 89%). The
  largest gap is wider than the dense FP8 tests' 0.25 because a slightly different hidden state can route
  a token of the second layer to another expert: the same model routing every token to all 8 experts
  (no choice to flip) measures max 0.125, mean 0.029.
"""

from __future__ import annotations

import pytest
import torch

from infercore import LLM, SamplingParams
from infercore.ops import fp8_math

PROMPTS = ["hello", "The engine cache block request server stream json tool call",
           " ".join(["the model of the token"] * 6)]
ENGINE = {"dtype": "float32", "max_model_len": 256, "num_gpu_blocks_override": 64, "max_num_seqs": 8,
          "cpu_threads": 1}
MAX_TOKENS = 24
EXACT_BOUND = 1e-4
W8A8_MAX_BOUND = 0.75
W8A8_MEAN_BOUND = 0.1
W8A8_TOP1_AGREEMENT = 0.8


def _identity_per_group(x: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    return x.float(), torch.ones(x.shape[0], -(-x.shape[1] // group))


def _generate(folder, prompts, engine=None, **params):
    llm = LLM(model=str(folder), **{**ENGINE, **(engine or {})})
    return llm.generate(prompts, SamplingParams(temperature=0, ignore_eos=True, **params), use_tqdm=False)


def _assert_same_outputs(ours_folder, twin_folder, label: str, ours_engine=None) -> None:
    ours = _generate(ours_folder, PROMPTS, ours_engine, max_tokens=MAX_TOKENS, logprobs=3)
    ref = _generate(twin_folder, PROMPTS, max_tokens=MAX_TOKENS, logprobs=3)
    for a, b in zip(ours, ref):
        assert a.outputs[0].token_ids == b.outputs[0].token_ids, f"{label}: prompt {a.prompt!r}"
        for step, (pa, pb) in enumerate(zip(a.outputs[0].logprobs, b.outputs[0].logprobs)):
            for token, lp in pa.items():
                assert abs(lp.logprob - pb[token].logprob) < EXACT_BOUND, f"{label}: {a.prompt!r} step {step}"


@pytest.mark.parametrize("shape", ["inter64", "inter48"])
def test_fp8_moe_weights_load_exactly(fp8_moe_pair, monkeypatch: pytest.MonkeyPatch, shape: str) -> None:
    quantized, twin = fp8_moe_pair(shape)
    monkeypatch.setattr(fp8_math, "quantize_per_group", _identity_per_group)
    _assert_same_outputs(quantized, twin, shape)


def test_quantization_fp8_quantizes_an_unquantized_moe_on_load(tiny_model_factory, tmp_path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # The float32 tiny Qwen3-MoE with --quantization fp8: attention and experts quantized in 128x128 blocks
    # as they load (partial blocks at these widths), against its weights dequantized from the same
    # 128x128 blocks, activation quantization off.
    from fp8_moe_checkpoints import MOE_SHAPES, write_online_twin

    folder = tiny_model_factory("Qwen3MoeForCausalLM", **MOE_SHAPES["inter48"])
    twin = write_online_twin(folder, tmp_path / "twin", 128)
    monkeypatch.setattr(fp8_math, "quantize_per_group", _identity_per_group)
    _assert_same_outputs(folder, twin, "--quantization fp8", {"quantization": "fp8"})


def _teacher_forced_gap(ours_folder, twin_folder) -> tuple[float, float, float]:
    """(largest and mean logprob difference, top-1 agreement) of ``ours_folder`` against ``twin_folder``,
    teacher-forced on the twin's greedy outputs."""
    ref = _generate(twin_folder, PROMPTS, max_tokens=MAX_TOKENS)
    forced = [{"prompt_token_ids": r.prompt_token_ids + r.outputs[0].token_ids} for r in ref]
    ours = _generate(ours_folder, forced, max_tokens=1, prompt_logprobs=1)
    theirs = _generate(twin_folder, forced, max_tokens=1, prompt_logprobs=1)
    worst, total, agree, positions = 0.0, 0.0, 0, 0
    for a, b in zip(ours, theirs):
        ids = a.prompt_token_ids
        for pos in range(1, len(ids)):
            pa, pb = a.prompt_logprobs[pos], b.prompt_logprobs[pos]
            gap = abs(pa[ids[pos]].logprob - pb[ids[pos]].logprob)
            worst, total = max(worst, gap), total + gap
            agree += min(pa, key=lambda t: pa[t].rank) == min(pb, key=lambda t: pb[t].rank)
            positions += 1
    return worst, total / positions, agree / positions


def test_fp8_moe_w8a8_stays_close_to_its_dequantized_twin(fp8_moe_pair) -> None:
    quantized, twin = fp8_moe_pair("inter64")
    worst, mean, agreement = _teacher_forced_gap(quantized, twin)
    message = (f"teacher-forced logprobs differ by up to {worst:.3f} (mean {mean:.3f}), top tokens agree at "
               f"{agreement:.0%}")
    assert worst < W8A8_MAX_BOUND and mean < W8A8_MEAN_BOUND and agreement >= W8A8_TOP1_AGREEMENT, message
