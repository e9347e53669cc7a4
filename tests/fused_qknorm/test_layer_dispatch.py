"""The Attention layer hands q/k norm + rotary to a backend that fuses it, and runs it itself otherwise."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

from infercore.attention import Attention, AttentionImpl
from infercore.attention.qk_norm_rotary import QKNormRotary
from infercore.attention.spec import AttentionLayerSpec
from infercore.forward_context import ForwardContext, set_forward_context
from infercore.layers import RMSNorm, get_rope
from infercore.ops import get_op

HEADS, KV_HEADS, HEAD = 4, 2, 16


@pytest.fixture(autouse=True)
def _no_grad() -> Iterator[None]:
    # The engine runs models without autograd; the norms' weights would otherwise make q and k need it.
    with torch.no_grad():
        yield


class RecordingImpl(AttentionImpl):
    """Returns q as the output and keeps what each entry point was given."""

    def __init__(self, spec: AttentionLayerSpec) -> None:
        super().__init__(spec)
        self.calls: list[tuple[str, torch.Tensor, torch.Tensor, QKNormRotary | None]] = []

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor,
                metadata: Any, out: torch.Tensor) -> torch.Tensor:
        self.calls.append(("forward", q.clone(), k.clone(), None))
        return out.copy_(q)


class FusingImpl(RecordingImpl):
    fuses_qk_norm_rotary = True

    def forward_qk_norm_rotary(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor,
                               metadata: Any, out: torch.Tensor, qk_norm_rotary: QKNormRotary) -> torch.Tensor:
        self.calls.append(("fused", q.clone(), k.clone(), qk_norm_rotary))
        return out.copy_(q)


def _layer(impl_cls: type[AttentionImpl]) -> Attention:
    layer = Attention(HEADS, HEAD, num_kv_heads=KV_HEADS, scale=HEAD**-0.5)
    layer.impl = impl_cls(layer.spec)
    return layer


def _inputs() -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(0)
    qkv = torch.randn(3, (HEADS + 2 * KV_HEADS) * HEAD, generator=gen)
    q, k, v = qkv.split([HEADS * HEAD, KV_HEADS * HEAD, KV_HEADS * HEAD], dim=-1)
    return torch.tensor([0, 4, 9]), q, k, v


def _norms() -> tuple[RMSNorm, RMSNorm]:
    q_norm, k_norm = RMSNorm(HEAD, eps=1e-6), RMSNorm(HEAD, eps=1e-6)
    with torch.no_grad():
        q_norm.weight.uniform_(0.5, 1.5)
        k_norm.weight.uniform_(0.5, 1.5)
    return q_norm, k_norm


def test_a_fusing_backend_gets_q_and_k_before_norm_and_rotary() -> None:
    layer, rope = _layer(FusingImpl), get_rope(HEAD, HEAD, 64, 10000.0, None, torch.float32, is_neox=False)
    q_norm, k_norm = _norms()
    positions, q, k, v = _inputs()
    q_in, k_in = q.clone(), k.clone()
    with set_forward_context(ForwardContext("meta", 3)):
        out = layer.forward_qk_norm_rotary(positions, q, k, v, rope, q_norm, k_norm)
    [(entry, got_q, got_k, prologue)] = layer.impl.calls
    assert entry == "fused" and out.shape == (3, HEADS * HEAD)
    assert torch.equal(got_q, q_in.view(3, HEADS, HEAD)) and torch.equal(got_k, k_in.view(3, KV_HEADS, HEAD))
    assert prologue.positions is positions and prologue.cos_sin_cache is rope.cos_sin_cache
    assert prologue.q_weight is q_norm.weight and prologue.k_weight is k_norm.weight
    assert prologue.eps == 1e-6 and prologue.is_neox is False


@pytest.mark.parametrize("impl_cls", [RecordingImpl, FusingImpl])
def test_otherwise_the_layer_norms_and_rotates_first(impl_cls: type[AttentionImpl]) -> None:
    # A backend without the flag, or a fusing one given partial rotary: the op runs, then forward.
    rotary_dim = HEAD if impl_cls is RecordingImpl else HEAD // 2
    layer, rope = _layer(impl_cls), get_rope(HEAD, rotary_dim, 64, 10000.0, None, torch.float32)
    q_norm, k_norm = _norms()
    positions, q, k, v = _inputs()
    if rotary_dim != HEAD:
        with set_forward_context(ForwardContext("meta", 3)), pytest.raises(ValueError, match="full rotary"):
            layer.forward_qk_norm_rotary(positions, q, k, v, rope, q_norm, k_norm)
        return
    # The platform's op (its kernel or the reference) on copies: what the layer must have run.
    expected_q, expected_k = get_op("qk_norm_rotary")(positions, q.clone(), k.clone(), q_norm.weight,
                                                      k_norm.weight, 1e-6, rope.cos_sin_cache, HEAD)
    with set_forward_context(ForwardContext("meta", 3)):
        layer.forward_qk_norm_rotary(positions, q, k, v, rope, q_norm, k_norm)
    [(entry, got_q, got_k, _)] = layer.impl.calls
    assert entry == "forward"
    assert torch.equal(got_q, expected_q.view(3, HEADS, HEAD)) and torch.equal(got_k, expected_k.view(3, KV_HEADS, HEAD))


def test_a_flag_without_the_method_says_what_to_do() -> None:
    class Flagged(RecordingImpl):
        fuses_qk_norm_rotary = True

    layer, rope = _layer(Flagged), get_rope(HEAD, HEAD, 64, 10000.0, None, torch.float32)
    positions, q, k, v = _inputs()
    with set_forward_context(ForwardContext("meta", 3)), pytest.raises(NotImplementedError, match="leave the flag"):
        layer.forward_qk_norm_rotary(positions, q, k, v, rope, *_norms())
