"""The SGMV LoRA kernels (interpreted) give the torch reference's results for mixed batches: tokens of
several adapters interleaved, tokens without one, ranks below the slot width, 1 to 3 output slices."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from infercore.lora.step_state import LoRAStepState
from infercore.ops import lora_reference
from infercore_triton.lora import lora_expand, lora_shrink


def _step(slots: list[int], max_loras: int) -> LoRAStepState:
    state = LoRAStepState(len(slots) + 4, max_loras, torch.device("cpu"), pin=False)
    state.set_step(np.array(slots, dtype=np.int32), len(slots) + 2)  # two padding tokens
    return state


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("sizes", [(48,), (32, 16, 16), (40, 40)])
def test_shrink_and_expand_match_the_reference(dtype, sizes):
    torch.manual_seed(0)
    max_loras, rank, hidden = 3, 8, 40
    slots = [0, -1, 2, 0, 1, 1, -1, 2, 0, 0, 2, -1, 1, 0, 0, 0, 0, 0, 0, 2, 1]
    state = _step(slots, max_loras)
    t = len(slots) + 2
    x = torch.randn(t, hidden, dtype=dtype)
    a = torch.randn(max_loras, len(sizes) * rank, hidden, dtype=dtype) * 0.2
    a[1, rank - 3:rank] = 0  # slot 1's first slice has rank 5: zero-padded rows
    b = torch.randn(max_loras, sum(sizes), rank, dtype=dtype) * 0.2
    offsets = tuple(int(v) for v in np.cumsum((0, *sizes)))
    args = (state.token_slots[:t], state.sorted_tokens[:t], state.slot_starts)
    xa = lora_shrink(x, a, *args)
    xa_ref = lora_reference.lora_shrink(x, a, *args)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(xa, xa_ref, atol=tol, rtol=tol)
    base = torch.randn(t, sum(sizes), dtype=dtype)
    out, out_ref = base.clone(), base.clone()
    lora_expand(out, xa_ref, b, *args, offsets)
    lora_reference.lora_expand(out_ref, xa_ref, b, *args, offsets)
    torch.testing.assert_close(out, out_ref, atol=tol, rtol=tol)
    untouched = [i for i, s in enumerate(slots) if s < 0] + [t - 2, t - 1]
    assert torch.equal(out[untouched], base[untouched]), "tokens without an adapter changed"


def test_the_reference_is_each_tokens_own_adapter():
    torch.manual_seed(1)
    slots = [1, -1, 0, 1]
    state = _step(slots, 2)
    x = torch.randn(4, 16)
    a, b = torch.randn(2, 4, 16), torch.randn(2, 8, 4)
    args = (state.token_slots[:4], state.sorted_tokens[:4], state.slot_starts)
    out = torch.zeros(4, 8)
    lora_reference.lora_expand(out, lora_reference.lora_shrink(x, a, *args), b, *args, (0, 8))
    for t, s in enumerate(slots):
        want = torch.zeros(8) if s < 0 else (x[t] @ a[s].T) @ b[s].T
        torch.testing.assert_close(out[t], want, atol=1e-5, rtol=1e-5)
    assert state.slot_starts.tolist() == [0, 1, 3] and state.sorted_tokens[:3].tolist() == [2, 0, 3]
