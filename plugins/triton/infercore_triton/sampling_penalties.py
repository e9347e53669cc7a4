"""Repetition, presence and frequency penalties in one pass over the logits.

Each program takes one tile of one batch row: it reads the row's index into the per-request tables,
the row's three penalties, then the tile's logits, prompt flags and output counts, and writes the
penalised logits back. A step costs one read and one write of the logits plus one read of each
table row, instead of a pass per elementwise step.

The arithmetic is the reference's, one rounding per operation: IEEE division (``div_rn``) and no
fused multiply-add (``enable_fp_fusion=False``), so the results are bit-identical to
``infercore.ops.reference.apply_penalties``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

#: Vocabulary entries per program.
_BLOCK = 2048


# The batch size is not specialised on, so every step runs the same variant.
@triton.jit(do_not_specialize=["batch"])
def _apply_penalties_kernel(
    logits_ptr, rows_ptr, prompt_ptr, counts_ptr, repetition_ptr, presence_ptr, frequency_ptr,
    batch, stride_logits, stride_table, vocab_size,
    BLOCK: tl.constexpr,
):
    """Penalise ``BLOCK`` logits of batch row ``program_id(0)`` in place."""
    b = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < vocab_size
    row = tl.load(rows_ptr + b).to(tl.int64)
    repetition = tl.load(repetition_ptr + b)
    presence = tl.load(presence_ptr + b)
    frequency = tl.load(frequency_ptr + b)
    logit_ptrs = logits_ptr + b.to(tl.int64) * stride_logits + cols
    logits = tl.load(logit_ptrs, mask=mask, other=0.0)
    in_prompt = tl.load(prompt_ptr + row * stride_table + cols, mask=mask, other=0) != 0
    counts = tl.load(counts_ptr + row * stride_table + cols, mask=mask, other=0).to(tl.float32)
    in_output = counts > 0
    repeated = tl.where(logits > 0, tl.math.div_rn(logits, repetition), logits * repetition)
    logits = tl.where(in_prompt | in_output, repeated, logits)
    logits = logits - (frequency * counts + presence * in_output.to(tl.float32))
    tl.store(logit_ptrs, logits, mask=mask)


def apply_penalties(logits: torch.Tensor, rows: torch.Tensor, prompt: torch.Tensor, output_counts: torch.Tensor,
                    repetition: torch.Tensor, presence: torch.Tensor, frequency: torch.Tensor) -> torch.Tensor:
    """Penalise ``logits`` [B, V] float32 in place from the tables' rows ``rows`` [B]; returns it.

    ``prompt`` [R, V] bool and ``output_counts`` [R, V] int32 are the per-request tables (contiguous);
    ``repetition``, ``presence`` and ``frequency`` are [B] or [B, 1] float32. Bit-identical to
    ``infercore.ops.reference.apply_penalties``; never waits for the device.
    """
    batch, vocab_size = logits.shape
    if logits.dtype != torch.float32 or logits.stride(1) != 1:
        raise ValueError(f"apply_penalties takes float32 logits [B, V] with contiguous rows; got "
                         f"{logits.dtype} with strides {logits.stride()}")
    if prompt.shape != output_counts.shape or prompt.shape[1] != vocab_size or output_counts.dtype != torch.int32:
        raise ValueError(f"apply_penalties takes bool and int32 tables [R, {vocab_size}]; got "
                         f"{prompt.dtype} {tuple(prompt.shape)} and {output_counts.dtype} "
                         f"{tuple(output_counts.shape)}")
    if batch == 0 or vocab_size == 0:
        return logits
    prompt, output_counts = prompt.contiguous(), output_counts.contiguous()
    repetition, presence, frequency = (p.reshape(batch).float() for p in (repetition, presence, frequency))
    block = min(_BLOCK, triton.next_power_of_2(vocab_size))
    _apply_penalties_kernel[(batch, triton.cdiv(vocab_size, block))](
        logits, rows, prompt.view(torch.uint8), output_counts, repetition, presence, frequency,
        batch, logits.stride(0), prompt.stride(0), vocab_size,
        BLOCK=block, num_warps=4, enable_fp_fusion=False,
    )
    return logits
