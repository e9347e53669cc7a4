"""The ``lora_apply`` custom op on Triton: ``out += (x @ A[slot]^T) @ B[slot]^T`` per token, in place.

The kernels read their per-token metadata from device buffers the runner fills once per step
(``infercore.lora.step_state``), so a captured graph replays any mix of adapters:

* a step of at most :data:`BGMV_MAX_TOKENS` tokens (decode) runs one launch per wrapped linear where the
  shape rule of ``lora_fused.fused_settings`` allows (the shrink recomputed by each output block: at most
  16 tokens and one slice's A of at most 64K elements, e.g. every W-GPU projection at rank 16; or what a
  measured table says), else the per-row kernels (``lora_bgmv``): the shrink split over the hidden
  dimension, so one token's A read spreads over many programs, then the expand over output blocks;
* a larger step runs the grouped kernels (``lora_sgmv``) over the step's tiles of one slot each.

The shrink of a merged projection (q/k/v, gate/up) is one product with the slices' A stacked; the
expand adds each output column its own slice's product, so a merged linear costs the same launches too.
Launch settings depend only on the shapes (cached), never on the step's data.
"""

from __future__ import annotations

import functools

import torch
import triton

from infercore_triton.lora_bgmv import bgmv_expand_kernel, bgmv_shrink_kernel
from infercore_triton.lora_fused import FusedSettings, bgmv_fused_kernel, fused_settings, rank_block
from infercore_triton.lora_sgmv import sgmv_expand_kernel, sgmv_shrink_kernel
from infercore_triton.pdl import launch_options, pdl_supported

#: Steps of at most this many tokens run the per-row kernels.
BGMV_MAX_TOKENS = 16
#: The most chunks the grouped shrink splits the hidden dimension into.
SGMV_MAX_SPLITS = 16
#: Programs the grouped shrink aims for before it splits the hidden dimension (a few per SM).
_TARGET_PROGRAMS = 264


@functools.cache
def bgmv_settings(k: int, nr: int) -> tuple[int, int, int]:
    """(BLOCK_N, BLOCK_K, splits) of the per-row shrink: one ``BLOCK_K`` chunk of the hidden dim a program."""
    block_n = min(64, triton.next_power_of_2(nr))
    block_k = min(max(16, 8192 // block_n), 256, max(64, triton.next_power_of_2(triton.cdiv(k, 4))))
    return block_n, block_k, triton.cdiv(k, block_k)


@functools.cache
def sgmv_settings(num_tiles: int, k: int, nr: int) -> tuple[int, int, int, int]:
    """(BLOCK_N, BLOCK_K, k_per_split, splits) of the grouped shrink: the hidden dim split in up to
    :data:`SGMV_MAX_SPLITS` chunks of at least 256 when the tiles alone fill fewer than :data:`_TARGET_PROGRAMS` programs."""
    block_n, block_k = min(64, max(16, triton.next_power_of_2(nr))), 64
    programs = num_tiles * triton.cdiv(nr, block_n)
    splits = max(1, min(SGMV_MAX_SPLITS, k // 256, triton.cdiv(_TARGET_PROGRAMS, programs)))
    k_per_split = triton.cdiv(triton.cdiv(k, splits), block_k) * block_k
    return block_n, block_k, k_per_split, triton.cdiv(k, k_per_split)


def _expand_block_n(rank: int) -> int:
    return max(16, min(128, 8192 // triton.next_power_of_2(rank)))


def lora_apply(out: torch.Tensor, x: torch.Tensor, lora_a: torch.Tensor, lora_b: torch.Tensor,
               token_slots: torch.Tensor, sorted_tokens: torch.Tensor, tiles: torch.Tensor, tile_rows: int,
               slice_offsets: tuple[int, ...]) -> torch.Tensor:
    """See ``infercore.ops.lora_reference.lora_apply``; ``out`` must have unit column stride."""
    num_tokens, width = out.shape
    if num_tokens == 0:
        return out
    x = _checked(out, x, slice_offsets)
    if num_tokens <= BGMV_MAX_TOKENS:
        fused = fused_settings(num_tokens, x.shape[1], lora_b.shape[2], width)
        if fused is not None:
            return bgmv_fused(out, x, lora_a, lora_b, token_slots, slice_offsets, fused)
        return bgmv_two_launches(out, x, lora_a, lora_b, token_slots, slice_offsets)
    k, nr, rank = x.shape[1], lora_a.shape[1], lora_b.shape[2]
    num_slices, bounds = len(slice_offsets) - 1, _bounds(slice_offsets, width)
    ieee = x.dtype == torch.float32
    num_tiles = tiles.shape[0]
    block_n, block_k, k_per_split, splits = sgmv_settings(num_tiles, k, nr)
    partial = torch.empty(splits, num_tokens, nr, dtype=torch.float32, device=x.device)
    block_m = max(16, triton.next_power_of_2(tile_rows))
    sgmv_shrink_kernel[(num_tiles, splits, triton.cdiv(nr, block_n))](
        x, lora_a, partial, sorted_tokens, tiles, k, nr, k_per_split, x.stride(0), lora_a.stride(0),
        lora_a.stride(1), partial.stride(0), partial.stride(1), BLOCK_M=block_m, BLOCK_N=block_n,
        BLOCK_K=block_k, IEEE=ieee)
    out_block = _expand_block_n(rank)
    sgmv_expand_kernel[(num_tiles, triton.cdiv(width, out_block))](
        out, partial, lora_b, sorted_tokens, tiles, width, rank, bounds[0], bounds[1], splits, out.stride(0),
        partial.stride(0), partial.stride(1), lora_b.stride(0), lora_b.stride(1), NUM_SLICES=num_slices,
        MAX_SPLITS=SGMV_MAX_SPLITS, BLOCK_M=block_m, BLOCK_N=out_block, BLOCK_R=rank_block(rank), IEEE=ieee)
    return out


def _checked(out: torch.Tensor, x: torch.Tensor, slice_offsets: tuple[int, ...]) -> torch.Tensor:
    """``x`` with unit column stride, after checking the slice count and ``out``'s layout."""
    num_slices = len(slice_offsets) - 1
    if num_slices > 3:
        raise ValueError(f"lora_apply takes at most 3 output slices (q/k/v), got {num_slices}")
    if out.stride(1) != 1:
        raise ValueError("lora_apply writes into an output with contiguous rows")
    return x if x.stride(1) == 1 else x.contiguous()


def _bounds(slice_offsets: tuple[int, ...], width: int) -> list[int]:
    """The second and third slices' first columns (``width`` for a slice that does not exist)."""
    return [*slice_offsets[1:len(slice_offsets) - 1], width, width][:2]


def bgmv_fused(out: torch.Tensor, x: torch.Tensor, lora_a: torch.Tensor, lora_b: torch.Tensor,
               token_slots: torch.Tensor, slice_offsets: tuple[int, ...], settings: FusedSettings) -> torch.Tensor:
    """The per-row path in one launch (``lora_fused``): ``lora_apply`` of a decode-sized step; ``x`` and
    ``out`` with unit column stride."""
    num_tokens, width = out.shape
    bounds = _bounds(slice_offsets, width)
    pdl = settings.pdl and pdl_supported(x.device)
    bgmv_fused_kernel[(num_tokens, triton.cdiv(width, settings.block_n))](
        out, x, lora_a, lora_b, token_slots, x.shape[1], width, lora_b.shape[2], bounds[0], bounds[1],
        out.stride(0), x.stride(0), lora_a.stride(0), lora_a.stride(1), lora_b.stride(0), lora_b.stride(1),
        NUM_SLICES=len(slice_offsets) - 1, BLOCK_N=settings.block_n, BLOCK_K=settings.block_k,
        BLOCK_R=rank_block(lora_b.shape[2]), K_ITERS=settings.k_iters(x.shape[1]), USE_PDL=pdl,
        num_warps=settings.num_warps, **launch_options(pdl))
    return out


def bgmv_two_launches(out: torch.Tensor, x: torch.Tensor, lora_a: torch.Tensor, lora_b: torch.Tensor,
                      token_slots: torch.Tensor, slice_offsets: tuple[int, ...]) -> torch.Tensor:
    """The per-row path in two launches (``lora_bgmv``: the shrink split over the hidden dimension, then the
    expand); ``x`` and ``out`` with unit column stride."""
    num_tokens, width = out.shape
    k, nr, rank = x.shape[1], lora_a.shape[1], lora_b.shape[2]
    bounds = _bounds(slice_offsets, width)
    block_n, block_k, splits = bgmv_settings(k, nr)
    partial = torch.empty(splits, num_tokens, nr, dtype=torch.float32, device=x.device)
    bgmv_shrink_kernel[(num_tokens, splits, triton.cdiv(nr, block_n))](
        x, lora_a, partial, token_slots, k, nr, x.stride(0), lora_a.stride(0), lora_a.stride(1),
        partial.stride(0), partial.stride(1), BLOCK_N=block_n, BLOCK_K=block_k)
    out_block = _expand_block_n(rank)
    bgmv_expand_kernel[(num_tokens, triton.cdiv(width, out_block))](
        out, partial, lora_b, token_slots, width, rank, bounds[0], bounds[1], splits, out.stride(0),
        partial.stride(0), partial.stride(1), lora_b.stride(0), lora_b.stride(1), NUM_SLICES=len(slice_offsets) - 1,
        BLOCK_N=out_block, BLOCK_R=triton.next_power_of_2(rank), SPLITS=triton.next_power_of_2(splits))
    return out
