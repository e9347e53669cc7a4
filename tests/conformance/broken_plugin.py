"""A deliberately broken plugin for the conformance kit's own tests (written out as a conftest.py).

It registers four broken attention backends (each built on the reference, with one thing wrong)
and a broken ``gelu`` kernel for the cpu platform; the kit must fail each, naming the case.
"""

from __future__ import annotations

import dataclasses

import torch

from infercore.plugin_api import (
    AttentionImpl,
    AttentionLayerSpec,
    ReferenceAttentionBackend,
    attention_reference,
    hookimpl,
)
from infercore.plugins import get_plugin_manager

_Base = ReferenceAttentionBackend.get_impl_cls()


class _WrongScaleImpl(_Base):
    def __init__(self, spec: AttentionLayerSpec) -> None:
        super().__init__(dataclasses.replace(spec, scale=spec.scale * 1.25))


class _WrongWindowImpl(_Base):
    def __init__(self, spec: AttentionLayerSpec) -> None:
        window = spec.sliding_window + 1 if spec.sliding_window is not None else None
        super().__init__(dataclasses.replace(spec, sliding_window=window))


class _IgnoredPrefixImpl(_Base):
    """Attends over this step's own tokens only, as if nothing were cached."""

    def forward(self, q, k, v, kv_cache, metadata, out):
        attention_reference.write_kv(k[: metadata.num_actual_tokens], v[: metadata.num_actual_tokens], kv_cache,
                                     metadata.slot_mapping)
        starts = metadata.query_start_loc.tolist()
        for i in range(metadata.num_reqs):
            s, e = starts[i], starts[i + 1]
            mask = attention_reference.causal_mask(e - s, e - s, self.sliding_window, q.device)
            out[s:e] = attention_reference.attend(q[s:e], k[s:e], v[s:e], mask, self.scale)
        return out


class _SwappedWriteImpl(_Base):
    """Attends rightly, but its cache write alone (``write_kv``) stores V where K belongs and K where V does."""

    def __init__(self, spec: AttentionLayerSpec) -> None:
        super().__init__(spec)
        self._right = _Base(spec)  # forward writes through its own (right) write_kv

    def forward(self, q, k, v, kv_cache, metadata, out):
        return self._right.forward(q, k, v, kv_cache, metadata, out)

    def write_kv(self, k, v, kv_cache, metadata):
        super().write_kv(v, k, kv_cache, metadata)


def _backend(name: str, impl: type[AttentionImpl]) -> type[ReferenceAttentionBackend]:
    return type(name, (ReferenceAttentionBackend,), {"name": name, "get_impl_cls": staticmethod(lambda: impl)})


WrongScaleBackend = _backend("broken_scale", _WrongScaleImpl)
WrongWindowBackend = _backend("broken_window", _WrongWindowImpl)
IgnoredPrefixBackend = _backend("broken_prefix", _IgnoredPrefixImpl)
SwappedWriteBackend = _backend("broken_write", _SwappedWriteImpl)


def broken_gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """Always the tanh approximation: wrong for the exact GELU."""
    return torch.nn.functional.gelu(x, approximate="tanh")


class BrokenPlugin:
    INFERCORE_PLUGIN_API = (1, 0)

    @hookimpl
    def register_attention_backends(self, register):
        register("broken_scale", "conftest:WrongScaleBackend")
        register("broken_window", "conftest:WrongWindowBackend")
        register("broken_prefix", "conftest:IgnoredPrefixBackend")
        register("broken_write", "conftest:SwappedWriteBackend")

    @hookimpl
    def register_custom_ops(self, register):
        register("gelu", "conftest:broken_gelu", platform="cpu")


get_plugin_manager().register_module(BrokenPlugin(), "broken", "broken-example", "0")
