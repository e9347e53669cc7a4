"""The layer catalogue beyond the Llama family: LayerNorm, GELU, GeGLU, learned positions, ALiBi."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from infercore.attention.reference import attend, causal_mask
from infercore.layers import GELU, GeGLU, LayerNorm, LearnedPositionEmbedding, alibi_slopes
from infercore.ops import reference


def test_layer_norm_with_and_without_bias() -> None:
    x = torch.randn(3, 16) * 4 + 2
    norm = LayerNorm(16, eps=1e-5)
    with torch.no_grad():
        norm.weight.normal_()
        norm.bias.normal_()
    mean, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)
    torch.testing.assert_close(norm(x), (x - mean) / torch.sqrt(var + 1e-5) * norm.weight + norm.bias)
    plain = LayerNorm(16, bias=False)
    assert plain.bias is None
    torch.testing.assert_close(plain(x), (x - mean) / torch.sqrt(var + 1e-5))


def test_layer_norm_keeps_half_precision_input_dtype() -> None:
    x = torch.randn(3, 16, dtype=torch.bfloat16)
    assert reference.layer_norm(x, torch.ones(16, dtype=torch.bfloat16), None, 1e-5).dtype == torch.bfloat16


def test_gelu_variants() -> None:
    x = torch.linspace(-4, 4, 33)
    exact = 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))
    tanh = 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    torch.testing.assert_close(GELU()(x), exact)
    torch.testing.assert_close(GELU("tanh")(x), tanh)
    assert not torch.allclose(exact, tanh)
    with pytest.raises(ValueError, match="'none' for the exact GELU"):
        GELU("fast")


def test_geglu_gates_the_second_half() -> None:
    x = torch.randn(2, 10)
    torch.testing.assert_close(GeGLU("tanh")(x), F.gelu(x[:, :5], approximate="tanh") * x[:, 5:])


def test_learned_position_embedding_with_offset() -> None:
    emb = LearnedPositionEmbedding(8, 4, offset=2)
    with torch.no_grad():
        emb.weight.copy_(torch.arange(40.0).view(10, 4))
    torch.testing.assert_close(emb(torch.tensor([0, 3])), emb.weight[[2, 5]])


def test_alibi_slopes_match_the_paper() -> None:
    assert alibi_slopes(8) == tuple(2.0 ** (-i) for i in range(1, 9))
    # Not a power of two: the 4-head slopes, then every other slope of the 8-head sequence.
    assert alibi_slopes(6) == (*alibi_slopes(4), 2.0**-1, 2.0**-3)


def test_alibi_attention_matches_explicit_bias() -> None:
    q, k, v = torch.randn(3, 4, 8), torch.randn(7, 2, 8), torch.randn(7, 2, 8)
    slopes = torch.tensor(alibi_slopes(4))
    out = attend(q, k, v, causal_mask(3, 7, None, q.device), 0.5, slopes)
    kk, vv = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q, kk) * 0.5
    q_pos, k_pos = torch.arange(4, 7).view(1, -1, 1), torch.arange(7).view(1, 1, -1)
    scores = scores + slopes.view(-1, 1, 1) * (k_pos - q_pos)
    scores = scores.masked_fill(k_pos > q_pos, float("-inf"))
    torch.testing.assert_close(out, torch.einsum("hqk,khd->qhd", scores.softmax(-1), vv))
