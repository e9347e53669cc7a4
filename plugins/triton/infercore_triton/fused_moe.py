"""The fused-MoE custom op: two grouped GEMMs over token slots sorted by expert, SiLU-and-mul between.

Each program computes a ``BLOCK_M`` x ``BLOCK_N`` tile of one expert's rows (the alignment step
makes every row block belong to one expert), reading the expert's weight tile straight from the
stacked [E, N, K] parameter; padding rows are masked out. The second GEMM scales each row by its
routing weight, and a sum over each token's ``top_k`` rows gives the output.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from infercore_triton.activation import silu_and_mul
from infercore_triton.fused_moe_align import ExpertAlignment, align_slots_to_experts


@triton.jit
def expert_tile(pid, capacity, N, num_slots, num_padded_ptr, sorted_slots_ptr, block_experts_ptr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """Program ``pid``'s output tile of a grouped GEMM over slots sorted by expert: whether it has rows (none past
    the padded slot count), its slots, which of them are real, their expert, its columns and which exist. Row
    blocks go in groups of ``GROUP_M`` that share weight tiles while they are in cache."""
    num_m = tl.cdiv(capacity, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    group = pid // (GROUP_M * num_n)
    first_m = group * GROUP_M
    group_size = min(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % (GROUP_M * num_n)) % group_size
    pid_n = (pid % (GROUP_M * num_n)) // group_size
    num_padded = tl.load(num_padded_ptr)
    live = pid_m * BLOCK_M < num_padded
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    # Padded counts are whole row blocks: a live block's rows are all below it, a dead one's all past it.
    slots = tl.load(sorted_slots_ptr + offs_m, mask=offs_m < num_padded, other=num_slots).to(tl.int64)
    expert = tl.load(block_experts_ptr + pid_m).to(tl.int64)  # one entry per row block: always in bounds
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    return live, slots, slots < num_slots, expert, offs_n, offs_n < N


# The slot counts change with every batch; specializing on them would build kernels while serving.
@triton.jit(do_not_specialize=["num_slots", "capacity"])
def _grouped_gemm_kernel(a_ptr, b_ptr, c_ptr, weights_ptr, sorted_slots_ptr, block_experts_ptr, num_padded_ptr,
                         N, K, num_slots, capacity, stride_am, stride_be, stride_bn, stride_bk, stride_cm,
                         ROWS_PER_A: tl.constexpr, MUL_WEIGHT: tl.constexpr, BLOCK_M: tl.constexpr,
                         BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                         PRECISION: tl.constexpr):
    live, slots, valid, expert, offs_n, mask_n = expert_tile(
        tl.program_id(0), capacity, N, num_slots, num_padded_ptr, sorted_slots_ptr, block_experts_ptr,
        BLOCK_M, BLOCK_N, GROUP_M)
    if not live:
        return
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + (slots // ROWS_PER_A)[:, None] * stride_am + offs_k[None, :]
    b_ptrs = b_ptr + expert * stride_be + offs_n[None, :] * stride_bn + offs_k[:, None] * stride_bk
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=valid[:, None] & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & mask_n[None, :], other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K * stride_bk
    if MUL_WEIGHT:
        acc = acc * tl.load(weights_ptr + slots, mask=valid, other=0.0)[:, None]
    c_ptrs = c_ptr + slots[:, None] * stride_cm + offs_n[None, :]
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=valid[:, None] & mask_n[None, :])


def block_sizes(num_slots: int, num_experts: int, n: int, k: int) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K): small row blocks when experts see few rows each (decode)."""
    block_m = 16 if num_slots <= 16 * num_experts else 64
    block_n = max(16, min(128 if block_m == 64 else 64, triton.next_power_of_2(n)))
    block_k = max(16, min(64 if block_m == 64 else 128, triton.next_power_of_2(k)))
    return block_m, block_n, block_k


def grouped_gemm(a: torch.Tensor, b: torch.Tensor, align: ExpertAlignment, rows_per_a: int, block_n: int,
                 block_k: int, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Slot rows ``a[slot // rows_per_a] @ b[expert(slot)]^T`` (times the slot's routing weight when
    ``weights`` is given): [num_slots, N]. ``a`` [M, K] contiguous rows, ``b`` [E, N, K]."""
    n, k = b.shape[1], b.shape[2]
    out = torch.empty((align.num_slots, n), dtype=a.dtype, device=a.device)
    capacity = align.sorted_slots.shape[0]
    grid = (triton.cdiv(capacity, align.block_m) * triton.cdiv(n, block_n),)
    _grouped_gemm_kernel[grid](
        a, b, out, weights if weights is not None else out, align.sorted_slots, align.block_experts,
        align.num_padded, n, k, align.num_slots, capacity, a.stride(0), b.stride(0), b.stride(1), b.stride(2),
        out.stride(0), ROWS_PER_A=rows_per_a, MUL_WEIGHT=weights is not None, BLOCK_M=align.block_m,
        BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=8,
        # float32 models get exact products (as their reference does), not TF32's 10-bit mantissas.
        PRECISION="ieee" if a.dtype == torch.float32 else None, num_warps=4, num_stages=3,
    )
    return out


def fused_moe(hidden: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_weights: torch.Tensor,
              topk_ids: torch.Tensor) -> torch.Tensor:
    """Mixture of SwiGLU experts, as :func:`infercore.ops.moe_reference.fused_moe` defines it."""
    tokens, top_k = topk_ids.shape
    num_experts, inter2, hidden_size = w13.shape
    if tokens == 0:
        return torch.zeros_like(hidden)
    hidden = hidden.contiguous()
    block_m, block_n, block_k = block_sizes(tokens * top_k, num_experts, inter2, hidden_size)
    align = align_slots_to_experts(topk_ids, num_experts, block_m)
    gate_up = grouped_gemm(hidden, w13, align, top_k, block_n, block_k)
    act = silu_and_mul(gate_up)
    _, block_n, block_k = block_sizes(tokens * top_k, num_experts, hidden_size, inter2 // 2)
    down = grouped_gemm(act, w2, align, 1, block_n, block_k, weights=topk_weights.reshape(-1).float().contiguous())
    return down.view(tokens, top_k, hidden_size).sum(dim=1, dtype=torch.float32).to(hidden.dtype)
