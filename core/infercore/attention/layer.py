"""The one Attention layer every model uses; it never exposes metadata or the cache layout."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from infercore.attention.backend import AttentionImpl
from infercore.attention.qk_norm_rotary import QKNormRotary
from infercore.attention.spec import AttentionLayerSpec
from infercore.forward_context import get_forward_context

if TYPE_CHECKING:
    from infercore.layers import RMSNorm, RotaryEmbedding


class Attention(nn.Module):
    """Paged attention for one decoder layer.

    The model runner binds ``impl`` (from the selected backend) and ``kv_cache`` (this layer's
    slice of the pool) after the model is built; the model only calls ``forward(q, k, v)``. The
    layer's :attr:`spec` is how the model declares its KV cache: the runner sizes the cache from
    the specs of the model's Attention layers (heads, KV heads, head size, window), not from
    the Hugging Face config's field names. ``attn_type="encoder_only"`` makes it bidirectional with no
    KV cache (:mod:`infercore.attention.encoder_only`). ``k_scale`` / ``v_scale`` are the per-tensor scales of an
    fp8 KV cache, set by the weight loader from the checkpoint (1.0 when it has none).
    """

    def __init__(self, num_heads: int, head_size: int, *legacy: Any, num_kv_heads: int | None = None,
                 scale: float | None = None, layer_index: int = 0, sliding_window: int | None = None,
                 alibi_slopes: tuple[float, ...] | None = None, attn_type: str = "decoder") -> None:
        """``Attention(num_heads, head_size, num_kv_heads=…, scale=…, layer_index=…)``: the keywords
        of :class:`AttentionLayerSpec`, in its order. The positional form of plugin API 1.5 and
        earlier (``scale, num_kv_heads, layer_index, sliding_window, alibi_slopes``) still works, with
        a DeprecationWarning, until the next major version."""
        if legacy:
            num_kv_heads, scale, layer_index, sliding_window, alibi_slopes = _legacy_arguments(
                legacy, num_kv_heads, scale, layer_index, sliding_window, alibi_slopes)
        if num_kv_heads is None or scale is None:
            raise TypeError("Attention needs num_kv_heads= and scale= (keywords, as in AttentionLayerSpec)")
        super().__init__()
        self.spec = AttentionLayerSpec(num_heads=num_heads, head_size=head_size, num_kv_heads=num_kv_heads,
                                       scale=scale, layer_index=layer_index, sliding_window=sliding_window,
                                       alibi_slopes=tuple(alibi_slopes) if alibi_slopes is not None else None,
                                       attn_type=attn_type)
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = scale
        self.num_kv_heads = num_kv_heads
        self.layer_index = layer_index
        self.sliding_window = sliding_window
        self.k_scale = 1.0
        self.v_scale = 1.0
        self.impl: AttentionImpl | None = None
        self.kv_cache: torch.Tensor = torch.empty(0)
        #: The KV cache group whose metadata this layer reads (:mod:`infercore.kv_cache.groups`).
        self.kv_group = 0

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q: [T, num_heads * head_size]; k, v: [T, num_kv_heads * head_size] → [T, num_heads * head_size].

        Inputs may be row-strided (column slices of the fused QKV output) with a contiguous last
        dimension; the backend receives them as such views.
        """
        impl = self._bound_impl()
        n = q.shape[0]
        q, k, v = self._heads(q, k, v)
        out = torch.empty_like(q)

        def call(metadata: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor) -> None:
            impl.forward(q, k, v, self.kv_cache, metadata, out)

        self._run(call, (q, k, v, out))
        return out.view(n, self.num_heads * self.head_size)

    def write_kv(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Only the cache entries of :meth:`forward` (``q``, ``k`` and ``v`` as there): the backend's cache write
        alone where its impl sets ``writes_kv_alone``, else :meth:`forward` with its output dropped."""
        impl = self._bound_impl()
        if not impl.writes_kv_alone:
            self.forward(q, k, v)
            return
        _, k, v = self._heads(q, k, v)

        def call(metadata: Any, k: torch.Tensor, v: torch.Tensor) -> None:
            impl.write_kv(k, v, self.kv_cache, metadata)

        self._run(call, (k, v))

    def forward_qk_norm_rotary(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                               rotary: RotaryEmbedding, q_norm: RMSNorm, k_norm: RMSNorm) -> torch.Tensor:
        """:meth:`forward` of ``q`` and ``k`` before their per-head RMSNorm and rotary (Qwen3's attention).

        A backend whose impl sets ``fuses_qk_norm_rotary`` does the norms and rotary in the pass that
        writes the KV cache; otherwise they run as ``rotary.forward_with_qk_norm`` before :meth:`forward`.
        ``q`` and ``k`` (as in :meth:`forward`, possibly column slices of the QKV output) may be
        overwritten.
        """
        impl = self._bound_impl()
        if not (impl.fuses_qk_norm_rotary and rotary.is_full and q_norm.eps == k_norm.eps):
            q, k = rotary.forward_with_qk_norm(positions, q, k, q_norm, k_norm)
            return self.forward(q, k, v)
        n = q.shape[0]
        q, k, v = self._heads(q, k, v)
        out = torch.empty_like(q)
        q_weight, k_weight, eps = q_norm.weight, k_norm.weight, q_norm.eps
        cos_sin_cache, is_neox = rotary.cos_sin_cache, rotary.is_neox

        def call(metadata: Any, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 out: torch.Tensor) -> None:
            prologue = QKNormRotary(positions=positions, q_weight=q_weight, k_weight=k_weight, eps=eps,
                                    cos_sin_cache=cos_sin_cache, is_neox=is_neox)
            impl.forward_qk_norm_rotary(q, k, v, self.kv_cache, metadata, out, prologue)

        self._run(call, (positions, q, k, v, out))
        return out.view(n, self.num_heads * self.head_size)

    def _run(self, call: Callable[..., None], tensors: tuple[torch.Tensor, ...]) -> None:
        """Run the backend ``call(metadata, *tensors)`` now, or hand it to a piecewise graph capture.

        A layer of a KV cache group after the first reads that group's metadata, from the forward context
        current when the call runs (a piecewise replay passes the first group's)."""
        ctx = get_forward_context()
        if self.kv_group:
            call = functools.partial(_in_group, call, self.kv_group - 1)
        if ctx.split_at_attention is not None:
            ctx.split_at_attention(call, tensors)
        else:
            call(ctx.attn_metadata, *tensors)

    def _bound_impl(self) -> AttentionImpl:
        if self.impl is None:
            raise RuntimeError("Attention layer has no backend bound; build the model through the model runner")
        return self.impl

    def _heads(self, q: torch.Tensor, k: torch.Tensor,
               v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        n = q.shape[0]
        return (q.view(n, self.num_heads, self.head_size), k.view(n, self.num_kv_heads, self.head_size),
                v.view(n, self.num_kv_heads, self.head_size))


def _in_group(call: Callable[..., None], index: int, _first_group_metadata: Any, *tensors: torch.Tensor) -> None:
    call(get_forward_context().group_attn_metadata[index], *tensors)


def _legacy_arguments(legacy: tuple[Any, ...], *given: Any) -> tuple[Any, ...]:
    """Map the old positional order (scale, num_kv_heads, layer_index, sliding_window, alibi_slopes) onto
    the keywords (num_kv_heads, scale, layer_index, sliding_window, alibi_slopes), warning once per call."""
    import warnings

    if len(legacy) > 5:
        raise TypeError(f"Attention takes at most 7 positional arguments ({2 + len(legacy)} given)")
    warnings.warn("Attention(num_heads, head_size, scale, num_kv_heads, layer_index, ...) with positional "
                  "arguments is deprecated; pass num_kv_heads=, scale=, layer_index= (and sliding_window=, "
                  "alibi_slopes=) as keywords, in AttentionLayerSpec's order", DeprecationWarning, stacklevel=3)
    names = ("scale", "num_kv_heads", "layer_index", "sliding_window", "alibi_slopes")
    values = dict(zip(("num_kv_heads", "scale", "layer_index", "sliding_window", "alibi_slopes"), given, strict=True))
    for name, value in zip(names, legacy, strict=False):
        values[name] = value
    return values["num_kv_heads"], values["scale"], values["layer_index"], values["sliding_window"], \
        values["alibi_slopes"]
