"""``accept_drafts``: the acceptance walk of speculative decoding, one lane per row.

Each lane walks its row's drafts in order and stops at the first that fails: a greedy row's draft
must equal the target's argmax, a sampled row's draft ``d`` passes when ``u * q(d) < p(d)``. The inputs
are per-draft scalars, so the kernel reads ``B x K`` values of each and computes exactly what the torch
reference (``infercore.plugin_api.op_reference.accept_drafts``) computes: one float32 multiply and a
comparison per draft, bit for bit the same decisions.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

#: Rows per program: the walk is a handful of loads per row, so one program covers many rows.
_ROWS = 128


# The batch and the width are not specialised on, so any step runs the one variant.
@triton.jit(do_not_specialize=["batch", "width"])
def _accept_drafts_kernel(draft_ptr, num_drafts_ptr, greedy_ptr, argmax_ptr, target_ptr, draft_prob_ptr,
                          uniform_ptr, out_ptr, batch, width, ROWS: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    in_batch = rows < batch
    num_drafts = tl.load(num_drafts_ptr + rows, mask=in_batch, other=0)
    greedy = tl.load(greedy_ptr + rows, mask=in_batch, other=0) != 0
    alive = in_batch
    accepted = tl.zeros([ROWS], dtype=tl.int64)
    base = rows.to(tl.int64) * width
    for j in range(0, width):
        live = alive & (j < num_drafts)
        offs = base + j
        draft = tl.load(draft_ptr + offs, mask=live, other=0)
        target_argmax = tl.load(argmax_ptr + offs, mask=live, other=-1)
        p = tl.load(target_ptr + offs, mask=live, other=0.0)
        q = tl.load(draft_prob_ptr + offs, mask=live, other=1.0)
        u = tl.load(uniform_ptr + offs, mask=live, other=1.0)
        passed = tl.where(greedy, draft == target_argmax, u * q < p)
        alive = live & passed
        accepted += alive.to(tl.int64)
    tl.store(out_ptr + rows, accepted, mask=in_batch)


def accept_drafts(draft_token_ids: torch.Tensor, num_drafts: torch.Tensor, greedy: torch.Tensor,
                  target_argmax: torch.Tensor, target_probs: torch.Tensor, draft_probs: torch.Tensor,
                  uniforms: torch.Tensor) -> torch.Tensor:
    """[B] int64 drafts accepted per row (see the torch reference for the arguments: [B, K] per draft,
    [B] per row)."""
    batch, width = draft_token_ids.shape
    out = torch.empty(batch, dtype=torch.int64, device=draft_token_ids.device)
    if batch == 0:
        return out
    _accept_drafts_kernel[(triton.cdiv(batch, _ROWS),)](
        draft_token_ids.long().contiguous(), num_drafts.long().contiguous(), greedy.to(torch.int8).contiguous(),
        target_argmax.long().contiguous(), target_probs.float().contiguous(), draft_probs.float().contiguous(),
        uniforms.float().contiguous(), out, batch, width, ROWS=_ROWS, num_warps=4)
    return out
