"""The encoder-only (bidirectional) kernel against the core reference, through the interpreter: GQA, a padded
head size, row-strided q/k/v slices of one fused projection, and sequences longer than a tile."""

from __future__ import annotations

import pytest
import torch

from infercore.attention.encoder_only import encoder_only_attention
from infercore_triton.encoder_attention import encoder_attention


@pytest.mark.parametrize(("heads", "kv_heads", "head"), [(4, 4, 32), (4, 2, 80)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_encoder_attention_matches_reference(heads: int, kv_heads: int, head: int, dtype: torch.dtype) -> None:
    lengths = [1, 17, 70, 5]
    total = sum(lengths)
    gen = torch.Generator().manual_seed(0)
    fused = torch.randn(total, (heads + 2 * kv_heads) * head, generator=gen).to(dtype)
    q, k, v = fused.split([heads * head, kv_heads * head, kv_heads * head], dim=-1)
    q, k, v = q.view(total, heads, head), k.view(total, kv_heads, head), v.view(total, kv_heads, head)
    starts = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    expected = encoder_only_attention(q.float(), k.float(), v.float(), starts, len(lengths), head**-0.5,
                                      torch.zeros(total, heads, head))
    out = torch.zeros(total, heads, head, dtype=dtype)
    encoder_attention(q, k, v, starts, len(lengths), max(lengths), head**-0.5, out, block_m=16, block_n=16)
    tolerance = 2e-2 if dtype == torch.bfloat16 else 1e-4
    assert float((out.float() - expected).abs().max()) / float(expected.abs().max()) < tolerance
