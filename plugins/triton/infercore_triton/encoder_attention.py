"""Encoder-only attention: bidirectional attention within each sequence, straight from the step's q/k/v.

No KV cache is read or written. Request ``i`` owns rows ``query_start_loc[i]:query_start_loc[i+1]`` of
``q``, ``k`` and ``v``; every row attends to every row of its request (flash attention with an online
softmax over key tiles of ``BLOCK_N``). One program owns ``BLOCK_M`` query rows of one request and one
query head; the grid is (m-blocks of the longest request, requests, heads), and programs past their
request's end exit at once. ``q``/``k``/``v`` may be row-strided column slices of the fused QKV output.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from infercore_triton.decode_attention import dot_precision


@triton.jit
def _encoder_attention_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, query_start_loc_ptr, scale,
    q_row, q_head, k_row, k_head, v_row, v_head, o_row, o_head,
    GROUP: tl.constexpr, HEAD: tl.constexpr, HEAD_PAD: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    m_block = tl.program_id(0)
    req = tl.program_id(1)
    head = tl.program_id(2)
    kv_head = head // GROUP
    start = tl.load(query_start_loc_ptr + req).to(tl.int64)
    length = tl.load(query_start_loc_ptr + req + 1).to(tl.int64) - start
    if m_block * BLOCK_M >= length:
        return
    rows = m_block * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_PAD)
    row_ok = rows < length
    dim_ok = dims < HEAD
    q = tl.load(q_ptr + (start + rows)[:, None] * q_row + head * q_head + dims[None, :],
                mask=row_ok[:, None] & dim_ok[None, :], other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_PAD], dtype=tl.float32)
    for n0 in range(0, length, BLOCK_N):
        cols = n0 + tl.arange(0, BLOCK_N)
        col_ok = cols < length
        k = tl.load(k_ptr + (start + cols)[:, None] * k_row + kv_head * k_head + dims[None, :],
                    mask=col_ok[:, None] & dim_ok[None, :], other=0.0)
        v = tl.load(v_ptr + (start + cols)[:, None] * v_row + kv_head * v_head + dims[None, :],
                    mask=col_ok[:, None] & dim_ok[None, :], other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * scale
        s = tl.where(col_ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=DOT_PRECISION)
        m_i = m_new
    acc = acc / l_i[:, None]
    tl.store(out_ptr + (start + rows)[:, None] * o_row + head * o_head + dims[None, :],
             acc.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & dim_ok[None, :])


def encoder_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, query_start_loc: torch.Tensor,
                      num_reqs: int, max_query_len: int, scale: float, out: torch.Tensor,
                      block_m: int = 64, block_n: int = 64) -> torch.Tensor:
    """Bidirectional attention of each request's rows: ``q``/``out`` [T, heads, D], ``k``/``v``
    [T, kv_heads, D] (head and feature dimensions dense), ``query_start_loc`` [num_reqs + 1] on the device."""
    if num_reqs == 0 or max_query_len == 0:
        return out
    heads, head = q.shape[1], q.shape[2]
    for name, t in (("q", q), ("k", k), ("v", v), ("out", out)):
        if t.stride(2) != 1:
            raise ValueError(f"encoder_attention needs {name} dense in its feature dimension")
    grid = (triton.cdiv(max_query_len, block_m), num_reqs, heads)
    _encoder_attention_kernel[grid](
        q, k, v, out, query_start_loc, scale,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), out.stride(0), out.stride(1),
        GROUP=heads // k.shape[1], HEAD=head, HEAD_PAD=max(triton.next_power_of_2(head), 16),
        BLOCK_M=block_m, BLOCK_N=block_n, DOT_PRECISION=dot_precision(q.dtype),
    )
    return out
