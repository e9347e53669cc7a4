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


def test_dummy_weights_give_layer_norms_unit_scale_and_zero_bias() -> None:
    from torch import nn

    from infercore.models.loader import init_dummy_weights

    model = nn.Sequential(nn.Linear(4, 4), LayerNorm(4))
    init_dummy_weights(model, seed=0)
    assert torch.equal(model[1].weight, torch.ones(4)) and torch.equal(model[1].bias, torch.zeros(4))
    assert model[0].weight.abs().max() > 0


def test_attention_impls_take_one_spec_not_positional_arguments() -> None:
    from infercore.attention.backend import AttentionImpl
    from infercore.attention.spec import AttentionLayerSpec

    class PlainImpl(AttentionImpl):
        def forward(self, q, k, v, kv_cache, metadata, out):  # noqa: ANN001, ANN202
            return out

    impl_cls = PlainImpl
    with pytest.raises(TypeError, match="built with one AttentionLayerSpec"):
        impl_cls(4, 32, 0.1, 2)
    impl = impl_cls(AttentionLayerSpec(num_heads=4, head_size=32, num_kv_heads=2, scale=0.1, sliding_window=8))
    assert (impl.num_heads, impl.num_kv_heads, impl.sliding_window) == (4, 2, 8)
    with pytest.raises(ValueError, match="not a multiple of 3 KV heads"):
        AttentionLayerSpec(num_heads=4, head_size=32, num_kv_heads=3, scale=0.1)
