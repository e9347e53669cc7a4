"""Reference ops against straightforward math, and op dispatch to a platform's registration."""

from __future__ import annotations

import math
import types

import pytest
import torch

from infercore.layers import RMSNorm, get_rope
from infercore.ops import get_op, reference
from infercore.platforms import current_platform
from infercore.plugins import hookimpl, reset_plugin_manager
from infercore.plugins.manager import PluginManager


def test_rms_norm() -> None:
    x, w = torch.randn(5, 8), torch.randn(8)
    expected = torch.stack([w * row / math.sqrt(float((row**2).mean()) + 1e-5) for row in x])
    torch.testing.assert_close(reference.rms_norm(x, w, 1e-5), expected)


def test_fused_add_rms_norm() -> None:
    x, res, w = torch.randn(5, 8), torch.randn(5, 8), torch.randn(8)
    out, new_res = reference.fused_add_rms_norm(x, res, w, 1e-6)
    torch.testing.assert_close(new_res, x + res)
    torch.testing.assert_close(out, reference.rms_norm(x + res, w, 1e-6))


def test_silu_and_mul() -> None:
    x = torch.randn(3, 10)
    gate, up = x[:, :5], x[:, 5:]
    torch.testing.assert_close(reference.silu_and_mul(x), gate / (1 + torch.exp(-gate)) * up)


def rotate_by_hand(vec: torch.Tensor, pos: int, base: float, neox: bool) -> torch.Tensor:
    """Rotate each pair of features of one head by angle pos * base^(-2i/d)."""
    d = vec.shape[0]
    out = vec.clone()
    for i in range(d // 2):
        a, b = (i, i + d // 2) if neox else (2 * i, 2 * i + 1)
        theta = pos * base ** (-2 * i / d)
        out[a] = vec[a] * math.cos(theta) - vec[b] * math.sin(theta)
        out[b] = vec[b] * math.cos(theta) + vec[a] * math.sin(theta)
    return out


@pytest.mark.parametrize("neox", [True, False])
def test_rotary_embedding(neox: bool) -> None:
    head, heads, kv_heads = 8, 3, 1
    rope = get_rope(head, head, 64, 100.0, None, torch.float32, is_neox=neox)
    positions = torch.tensor([0, 5, 63])
    q, k = torch.randn(3, heads * head), torch.randn(3, kv_heads * head)
    q_out, k_out = reference.rotary_embedding(positions, q, k, rope.cos_sin_cache, head, neox)
    for t, pos in enumerate(positions.tolist()):
        for h in range(heads):
            torch.testing.assert_close(q_out[t, h * head:(h + 1) * head],
                                       rotate_by_hand(q[t, h * head:(h + 1) * head], pos, 100.0, neox))
        torch.testing.assert_close(k_out[t], rotate_by_hand(k[t], pos, 100.0, neox))


def test_partial_rotary_leaves_the_tail() -> None:
    rope = get_rope(8, 4, 16, 100.0, None, torch.float32)
    q, k = torch.randn(2, 16), torch.randn(2, 8)
    q_out, _ = reference.rotary_embedding(torch.tensor([3, 7]), q, k, rope.cos_sin_cache, 8)
    torch.testing.assert_close(q_out.view(2, 2, 8)[..., 4:], q.view(2, 2, 8)[..., 4:])
    torch.testing.assert_close(q_out.view(2, 2, 8)[0, 0, :4], rotate_by_hand(q[0, :4], 3, 100.0, True))


@pytest.mark.parametrize("neox", [True, False])
def test_qk_norm_rotary_norms_each_head_then_rotates_in_place(neox: bool) -> None:
    head, heads, kv_heads = 8, 3, 1
    rope = get_rope(head, head, 64, 100.0, None, torch.float32, is_neox=neox)
    positions = torch.tensor([0, 5, 63])
    qkv = torch.randn(3, (heads + 2 * kv_heads) * head)
    q, k, v = qkv.split([heads * head, kv_heads * head, kv_heads * head], dim=-1)
    q_in, k_in, v_in = q.clone(), k.clone(), v.clone()
    q_w, k_w = torch.randn(head), torch.randn(head)
    q_out, k_out = reference.qk_norm_rotary(positions, q, k, q_w, k_w, 1e-6, rope.cos_sin_cache, head, neox)
    assert q_out.data_ptr() == q.data_ptr() and k_out.data_ptr() == k.data_ptr()
    torch.testing.assert_close(v, v_in)

    def by_hand(vec: torch.Tensor, weight: torch.Tensor, pos: int) -> torch.Tensor:
        normed = weight * vec / math.sqrt(float((vec**2).mean()) + 1e-6)
        return rotate_by_hand(normed, pos, 100.0, neox)

    for t, pos in enumerate(positions.tolist()):
        for h in range(heads):
            torch.testing.assert_close(q[t, h * head:(h + 1) * head],
                                       by_hand(q_in[t, h * head:(h + 1) * head], q_w, pos))
        torch.testing.assert_close(k[t], by_hand(k_in[t], k_w, pos))


def test_qk_norm_rotary_needs_full_rotary() -> None:
    rope = get_rope(8, 4, 16, 100.0, None, torch.float32)
    q, k, w = torch.randn(2, 16), torch.randn(2, 8), torch.ones(8)
    with pytest.raises(ValueError, match="full rotary"):
        reference.qk_norm_rotary(torch.tensor([0, 1]), q, k, w, w, 1e-6, rope.cos_sin_cache, 8)
    with pytest.raises(ValueError, match="full rotary"):
        rope.forward_with_qk_norm(torch.tensor([0, 1]), q, k, RMSNorm(8), RMSNorm(8))


def test_unknown_rope_type_is_an_error() -> None:
    with pytest.raises(ValueError, match="longrope"):
        get_rope(8, 8, 16, 100.0, {"rope_type": "longrope"}, torch.float32)


def fake_layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
    return torch.zeros_like(x)


def test_get_op_prefers_the_platforms_registration() -> None:
    platform = current_platform().name
    plugin = types.ModuleType("throwaway_ops")
    plugin.INFERCORE_PLUGIN_API = 1

    @hookimpl
    def register_custom_ops(register) -> None:
        register("layer_norm", f"{__name__}:fake_layer_norm", platform=platform)
        register("gelu_and_mul", f"{__name__}:fake_layer_norm", platform="some-other-platform")

    plugin.register_custom_ops = register_custom_ops
    manager = PluginManager()
    manager.load_entry_points()
    manager.register_module(plugin, "throwaway")
    assert get_op("layer_norm") is reference.layer_norm
    reset_plugin_manager(manager)
    try:
        assert get_op("layer_norm") is fake_layer_norm
        assert get_op("gelu_and_mul") is reference.gelu_and_mul
    finally:
        reset_plugin_manager(None)
    assert get_op("layer_norm") is reference.layer_norm


def test_op_lookup_never_falls_back_to_another_platforms_kernel() -> None:
    from infercore.plugins.registry import Registration, Registry

    ops = Registry("custom_op", multi=True)
    ops.add(Registration("custom_op", "fancy", "acme_ops:fancy", "acme", {"platform": "acme"}))
    with pytest.raises(KeyError, match="no implementation for platform 'cpu'"):
        ops.get("fancy", "cpu")
    assert ops.get("fancy", "acme").target == "acme_ops:fancy"
