"""Custom op ``lora_linear`` on CUDA: a LoRA-wrapped linear's base product and adapter term.

At decode a LoRA linear would otherwise launch the base GEMM and then ``lora_apply`` (one or two kernels): at
batch 1 on the 0.6B shape those extra launches, four wrapped linears a layer, are most of the adapter's cost.
For steps of at most :data:`IN_GEMM_MAX_M` tokens in bf16/fp16 the skinny GEMM adds each row's adapter term
in the same pass (:class:`~infercore_triton.skinny_gemm.LoRATerm`): a down projection's SwiGLU activation, its
product and its adapter term become one launch. Its settings (:func:`in_gemm_config`) favour wider output
blocks than the plain GEMM's, since every block recomputes its rows' ``x @ A^T`` (A read from L2: at rank
16, blocks of 32 columns read half as many bytes of A as of the weight).

That path is on only with ``INFERCORE_LORA_IN_GEMM=1``: on an H100 (0.6B shape, one rank-16 adapter, batch
1) it measured 1.643 ms/token against 1.649 for the base op plus the fused ``lora_apply`` kernel. The launches
it saves are paid back by the recomputed shrinks (about 3.6 µs more per wrapped linear in an engine step, and
the split-K reduce launches that fill the GPU). Every other step runs the base op, then ``lora_apply``.
"""

from __future__ import annotations

import functools
import os

import torch
import triton

from infercore_triton.activation import silu_and_mul
from infercore_triton.lora import lora_apply
from infercore_triton.skinny_gemm import (
    _ELEMENTWISE_TILE,
    _HALF_DTYPES,
    LoRATerm,
    SkinnyConfig,
    _num_sms,
    linear,
    skinny_gemm,
)

#: ``INFERCORE_LORA_IN_GEMM=1`` runs decode-sized steps' product and adapter term as one launch (off by default).
IN_GEMM_ENV = "INFERCORE_LORA_IN_GEMM"
#: The most tokens a step may have for the adapter term to run inside the GEMM (its elementwise path).
IN_GEMM_MAX_M = 4
#: Device types and dtypes the one-launch path takes.
_DEVICES = ("cuda",)
_DTYPES = _HALF_DTYPES


@functools.cache
def in_gemm_config(m: int, n: int, k: int, rank: int, num_sms: int = 132) -> SkinnyConfig:
    """Settings of the GEMM with an adapter term: 32 output columns a program up to rank 16 (64 above), so
    that a program's A reads stay at most half its weight reads; chunks of K as wide as
    ``_ELEMENTWISE_TILE`` products allow; K split (a power of two) only until there is one program per SM."""
    block_n = 32 if rank <= 16 else 64
    m_pad = triton.next_power_of_2(m)
    block_k = max(64, min(triton.next_power_of_2(k), _ELEMENTWISE_TILE // (block_n * m_pad)))
    split_k = 1
    while triton.cdiv(n, block_n) * split_k < num_sms and k >= 2 * split_k * block_k:
        split_k *= 2
    return SkinnyConfig(block_n=block_n, block_k=block_k, split_k=split_k)


def _in_gemm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, lora_a: torch.Tensor,
             lora_b: torch.Tensor, token_slots: torch.Tensor) -> bool:
    """Whether this step's product and adapter term run as one skinny GEMM (``x`` without the gate half)."""
    return (os.environ.get(IN_GEMM_ENV, "0") == "1" and x.device.type in _DEVICES and x.dim() == 2
            and 1 <= x.shape[0] <= IN_GEMM_MAX_M and x.dtype in _DTYPES and weight.dtype == x.dtype
            and lora_a.dtype == x.dtype and lora_b.dtype == x.dtype and x.stride(1) == 1
            and weight.is_contiguous() and lora_a.stride(2) == 1 and lora_b.stride(2) == 1
            and token_slots.dtype == torch.int32 and token_slots.is_contiguous()
            and (bias is None or (bias.dtype == x.dtype and bias.is_contiguous())))


def lora_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, lora_a: torch.Tensor,
                lora_b: torch.Tensor, token_slots: torch.Tensor, sorted_tokens: torch.Tensor, tiles: torch.Tensor,
                tile_rows: int, slice_offsets: tuple[int, ...], gated: bool = False) -> torch.Tensor:
    """See ``infercore.ops.lora_reference.lora_linear``."""
    inputs = x[:, : x.shape[1] // 2] if gated else x
    if _in_gemm(inputs, weight, bias, lora_a, lora_b, token_slots):
        cfg = in_gemm_config(x.shape[0], weight.shape[0], weight.shape[1], lora_b.shape[2], _num_sms(x.device))
        term = LoRATerm(lora_a, lora_b, token_slots, slice_offsets)
        if term.fits(cfg.block_n):
            return skinny_gemm(x, weight, bias, cfg, gated=gated, lora=term)
    act = silu_and_mul(x) if gated else x
    out = linear(act, weight, bias)
    return lora_apply(out, act, lora_a, lora_b, token_slots, sorted_tokens, tiles, tile_rows, slice_offsets)
