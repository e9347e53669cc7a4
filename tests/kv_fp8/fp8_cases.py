"""Helpers of the fp8 KV tests: a case's step over an fp8 cache, and the same step over a plain cache."""

from __future__ import annotations

import dataclasses

import torch

from infercore.attention.reference import paged_attention, write_kv
from infercore.testing.attention_cases import AttentionCase, build_step, layer_spec

#: Relative error of fp8-cache attention against an unquantized cache: e4m3 keeps 3 mantissa bits
#: (about 3% per entry); attention averages over the context.
UNQUANTIZED_BOUND = 0.08


def unquantized_output(case: AttentionCase, dtype: torch.dtype) -> torch.Tensor:
    """The reference's output of ``case``'s step over a cache in ``dtype`` (the same q, k, v)."""
    plain = dataclasses.replace(case, fp8_scales=None)
    q, k, v, cache, common = build_step(plain, torch.device("cpu"), dtype)
    n = common.num_actual_tokens
    write_kv(k[:n], v[:n], cache, common.slot_mapping)
    spec = layer_spec(plain, dtype)
    return paged_attention(q, cache, common.query_start_loc_cpu, common.seq_lens_cpu, common.block_table,
                           spec.scale, torch.zeros_like(q), case.sliding_window, None, common.num_reqs)[:n]


def relative_error(out: torch.Tensor, expected: torch.Tensor) -> float:
    """Largest absolute difference over the largest magnitude of ``expected``."""
    return float((out.float() - expected.float()).abs().max()) / float(expected.float().abs().max())
