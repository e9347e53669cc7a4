"""Random paged-attention cases and their reference, shared by the interpreter and the GPU tests."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from infercore.attention.reference import paged_attention, write_kv


@dataclass
class PagedCase:
    """A ragged batch over a shuffled paged cache that holds each request's cached prefix.

    The step's own K/V (``k``, ``v`` at ``slot_mapping``) are not in the cache yet.
    """

    q: torch.Tensor  # [T, H, D]
    k: torch.Tensor  # [T, KVH, D]
    v: torch.Tensor
    kv_cache: torch.Tensor  # [2, blocks, block_size, KVH, D]
    query_start_loc: torch.Tensor
    seq_lens: torch.Tensor
    block_table: torch.Tensor
    slot_mapping: torch.Tensor
    max_query_len: int


def make_case(seq_lens: list[int], query_lens: list[int], num_heads: int, num_kv_heads: int, head_size: int,
              block_size: int, dtype: torch.dtype, device: str = "cpu", seed: int = 0) -> PagedCase:
    """Blocks are handed out in a random order; unused cache slots hold random values too."""
    gen = torch.Generator().manual_seed(seed)
    blocks_per_req = [-(-n // block_size) for n in seq_lens]
    num_blocks = sum(blocks_per_req) + 2
    perm = torch.randperm(num_blocks, generator=gen)
    kv_cache = torch.randn((2, num_blocks, block_size, num_kv_heads, head_size), generator=gen)
    block_table = torch.zeros((len(seq_lens), max(blocks_per_req + [1]) + 1), dtype=torch.int32)
    slots = []
    used = 0
    for i, (length, q_len) in enumerate(zip(seq_lens, query_lens, strict=True)):
        pages = perm[used:used + blocks_per_req[i]]
        used += blocks_per_req[i]
        block_table[i, :len(pages)] = pages.to(torch.int32)
        pos = torch.arange(length - q_len, length)
        slots.append(pages[pos // block_size] * block_size + pos % block_size)
    total = sum(query_lens)
    qsl = torch.zeros(len(seq_lens) + 1, dtype=torch.int32)
    qsl[1:] = torch.cumsum(torch.tensor(query_lens), 0)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(shape, generator=gen).to(dtype).to(device)

    return PagedCase(
        q=rand(total, num_heads, head_size), k=rand(total, num_kv_heads, head_size),
        v=rand(total, num_kv_heads, head_size), kv_cache=kv_cache.to(dtype).to(device),
        query_start_loc=qsl.to(device), seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=device),
        block_table=block_table.to(device), slot_mapping=torch.cat(slots).to(torch.int64).to(device),
        max_query_len=max(query_lens + [0]),
    )


def reference_attention(case: PagedCase, scale: float, sliding_window: int | None = None,
                        dtype: torch.dtype = torch.float64, device: str = "cpu") -> torch.Tensor:
    """Core's reference in ``dtype`` on ``device``, after writing the step's K/V into a copy of the cache."""

    def up(t: torch.Tensor) -> torch.Tensor:
        return t.to(device=device, dtype=dtype)

    cache = up(case.kv_cache).clone()
    write_kv(up(case.k), up(case.v), cache, case.slot_mapping.to(device))
    out = torch.zeros(case.q.shape, dtype=dtype, device=device)
    return paged_attention(up(case.q), cache, case.query_start_loc.to(device), case.seq_lens.to(device),
                           case.block_table.to(device), scale, out, sliding_window)


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """‖out − ref‖ / ‖ref‖ in float64; NaN anywhere gives NaN, which fails every bound."""
    out, ref = out.double().cpu(), ref.double().cpu()
    return ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()


#: Relative-error bounds per dtype (bf16 operands, float32 accumulation).
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 1.5e-2, torch.float16: 3e-3}
