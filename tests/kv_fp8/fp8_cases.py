"""Helpers of the fp8 KV tests: a case's step over a plain cache, errors, checkpoints with KV scales."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

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


def with_kv_scales(src: Path, dst: Path, tensors: dict[str, torch.Tensor]) -> Path:
    """A copy of checkpoint folder ``src`` whose safetensors also hold ``tensors`` (KV cache scales)."""
    shutil.copytree(src, dst)
    weights = dst / "model.safetensors"
    save_file({**load_file(str(weights)), **tensors}, str(weights))
    return dst
