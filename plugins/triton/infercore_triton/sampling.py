"""Sampling in one pass over the logits: temperature, Gumbel-max draw and argmax fused.

``gumbel_argmax`` picks ``argmax_v(logits[b, v] / T[b] - log q[b, v])`` with ``q ~ Exp(1)``, which is
a draw from ``softmax(logits[b] / T[b])`` (the Gumbel-max trick), computed as the same argmax of
``logits[b, v] - T[b] * log q[b, v]`` (no division); rows with ``T[b] == 0`` take the plain argmax. The exponentials come from Philox keyed by the row's seed, with vocabulary entry
``v`` at counter ``v // 4``, output ``v % 4``: a row's token depends only on its logits, its
temperature and its seed, never on the batch or the launch shape.

Two kernels: each program of the first reduces a block of up to 2048 vocabulary entries of one row
to (best score, its index), so a 150k-wide row spreads over many programs; the second picks each
row's best block. A vocabulary that fits one block takes one kernel, several rows per program. Ties
go to the smallest index, as in ``torch.argmax``, so greedy rows are bit-identical to it. An optional
per-row threshold (the top-k/top-p cut) makes the logits below it -inf as they are loaded, which
draws the tokens a -inf mask written before the call would, without that pass over the logits.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

#: An index larger than any vocabulary index, for lanes that must lose the smallest-index tie-break.
_NO_INDEX = tl.constexpr(2**31 - 1)
#: Below the smallest non-zero uniform ``tl.rand4x`` returns (about 2**-31): keeps ``log(u)`` finite.
_MIN_UNIFORM = tl.constexpr(2.0**-32)
#: The smallest exponential kept (the uniform's resolution below 1, as torch's exponential_ does), so
#: ``-log(q)`` stays finite even where ``log`` rounds ``log(u)`` to 0 for ``u`` just below 1.
_MIN_EXPONENTIAL = tl.constexpr(2.0**-24)

#: Vocabulary entries per program of the first kernel.
_MAX_BLOCK = 2048


# The batch size is not specialised on, so batches of 1 or of multiples of 16 need no variant of their own;
# nor is ``cut``, so draws with and without a threshold share one variant (the one start-up builds).
@triton.jit(do_not_specialize=["batch", "cut"])
def _block_best_kernel(
    logits_ptr, temperature_ptr, seeds_ptr, threshold_ptr, best_value_ptr, best_index_ptr, out_ptr,
    batch, stride_row, vocab_size, num_blocks, cut,
    ROWS: tl.constexpr, QUADS: tl.constexpr, ONE_BLOCK: tl.constexpr,
):
    """Best (score, index) of ``4 * QUADS`` vocabulary entries of ``ROWS`` rows (ROWS > 1 only when
    a whole row fits one block); with ``ONE_BLOCK`` that is the row's token, written to ``out_ptr``."""
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    block = tl.program_id(1)
    row_ok = rows < batch
    cols = block * (4 * QUADS) + tl.arange(0, 4 * QUADS)
    mask = row_ok[:, None] & (cols[None, :] < vocab_size)
    ptrs = logits_ptr + rows.to(tl.int64)[:, None] * stride_row + cols[None, :]
    scores = tl.load(ptrs, mask=mask, other=float("-inf")).to(tl.float32)
    if cut != 0:
        threshold = tl.load(threshold_ptr + rows, mask=row_ok, other=float("-inf"))
        scores = tl.where(scores < threshold[:, None], float("-inf"), scores)
    temperature = tl.load(temperature_ptr + rows, mask=row_ok, other=0.0)
    if tl.max(temperature, axis=0) > 0:
        seeds = tl.load(seeds_ptr + rows, mask=row_ok, other=0)
        # Entry v takes output v % 4 of Philox counter v // 4: four entries per Philox call.
        quads = block * QUADS + tl.arange(0, QUADS)
        u0, u1, u2, u3 = tl.rand4x(seeds[:, None], quads[None, :] + tl.zeros((ROWS, QUADS), tl.int32))
        u = tl.reshape(tl.join(tl.join(u0, u2), tl.join(u1, u3)), (ROWS, 4 * QUADS))
        q = tl.maximum(-tl.log(tl.maximum(u, _MIN_UNIFORM)), _MIN_EXPONENTIAL)
        t = temperature[:, None]
        # argmax(l / T - log q) is argmax(l - T * log q) for T > 0: the same draw without a division per entry.
        # log(q) is finite, so -inf logits stay -inf and no score is NaN; greedy rows (T = 0) keep their logits.
        scores = scores - t * tl.log(q)
    best = tl.max(scores, axis=1)
    index = tl.min(tl.where(scores == best[:, None], cols[None, :], _NO_INDEX), axis=1)
    if ONE_BLOCK:
        tl.store(out_ptr + rows, index.to(tl.int64), mask=row_ok)
    else:
        tl.store(best_value_ptr + rows * num_blocks + block, best, mask=row_ok)
        tl.store(best_index_ptr + rows * num_blocks + block, index, mask=row_ok)


@triton.jit
def _row_best_kernel(best_value_ptr, best_index_ptr, out_ptr, num_blocks, BLOCKS: tl.constexpr):
    """Each row's token: the index of its best block's best score, the smallest index on ties."""
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCKS)
    mask = offs < num_blocks
    values = tl.load(best_value_ptr + row * num_blocks + offs, mask=mask, other=float("-inf"))
    indices = tl.load(best_index_ptr + row * num_blocks + offs, mask=mask, other=_NO_INDEX)
    best = tl.max(values, axis=0)
    # Block 0 always holds a real index, so a row of -inf logits gets index 0, as torch.argmax gives.
    index = tl.min(tl.where(values == best, indices, _NO_INDEX), axis=0)
    tl.store(out_ptr + row, index.to(tl.int64))


def gumbel_argmax(logits: torch.Tensor, temperature: torch.Tensor, seeds: torch.Tensor,
                  threshold: torch.Tensor | None = None) -> torch.Tensor:
    """One sampled token per row of ``logits`` [B, V] (bf16, fp16 or fp32, last dimension contiguous).

    ``temperature`` [B] float32: 0 makes the row greedy (``torch.argmax`` of its logits, ties to the
    smallest index); otherwise the row draws from ``softmax(logits[b] / temperature[b])`` by the
    Gumbel-max trick, with one Philox exponential per vocabulary entry keyed by ``seeds[b]`` [B] int64
    (non-negative). Returns int64 tokens [B]. The scores and the argmax run in float32; a -inf logit
    is chosen only when its whole row is -inf (then index 0, like ``torch.argmax``). ``threshold``
    [B, 1] or [B] (optional): logits below their row's threshold count as -inf.

    The reference op (``infercore.ops.reference.gumbel_argmax``) is an exact sampler of the same
    distribution but draws from torch's generator: the same seed gives different tokens there.
    """
    if logits.dim() != 2 or temperature.shape != logits.shape[:1] or seeds.shape != logits.shape[:1]:
        raise ValueError(f"gumbel_argmax takes logits [B, V], temperature [B] and seeds [B]; got "
                         f"{tuple(logits.shape)}, {tuple(temperature.shape)} and {tuple(seeds.shape)}")
    if logits.stride(1) != 1:
        logits = logits.contiguous()
    batch, vocab_size = logits.shape
    out = torch.empty(batch, dtype=torch.int64, device=logits.device)
    if batch == 0 or vocab_size == 0:
        return out.zero_()
    block = min(_MAX_BLOCK, max(16, triton.next_power_of_2(vocab_size)))
    num_blocks = triton.cdiv(vocab_size, block)
    # Small vocabularies: several rows per program, and the first kernel writes the tokens itself.
    # The rows per program do not follow the batch size, so every batch runs the same variant.
    rows = _MAX_BLOCK // block if num_blocks == 1 else 1
    temperature = temperature.float().contiguous()
    seeds = seeds.long().contiguous()
    if threshold is not None:
        if threshold.numel() != batch:
            raise ValueError(f"gumbel_argmax takes a threshold [B, 1] for {batch} rows; got {tuple(threshold.shape)}")
        # float32 whatever the logits' dtype (exact for bf16 and fp16): one pointer type, one variant.
        threshold = threshold.reshape(batch).float().contiguous()
    if num_blocks == 1:
        best_value, best_index = out, out  # unused
    else:
        best_value = torch.empty((batch, num_blocks), dtype=torch.float32, device=logits.device)
        best_index = torch.empty((batch, num_blocks), dtype=torch.int32, device=logits.device)
    _block_best_kernel[(triton.cdiv(batch, rows), num_blocks)](
        logits, temperature, seeds, temperature if threshold is None else threshold, best_value, best_index, out,
        batch, logits.stride(0), vocab_size, num_blocks, int(threshold is not None),
        ROWS=rows, QUADS=block // 4, ONE_BLOCK=num_blocks == 1,
        num_warps=max(1, min(4, rows * block // 256)),
    )
    if num_blocks > 1:
        _row_best_kernel[(batch,)](best_value, best_index, out, num_blocks,
                                   BLOCKS=triton.next_power_of_2(num_blocks), num_warps=1)
    return out
