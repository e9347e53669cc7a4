"""``Attention(...)`` takes its spec's arguments as keywords in ``AttentionLayerSpec``'s order; the old
positional form (scale before num_kv_heads) still builds the same layer, with a DeprecationWarning."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from infercore.plugin_api import Attention, AttentionLayerSpec


def test_keywords_follow_the_spec_order() -> None:
    keywords = [p.name for p in inspect.signature(Attention).parameters.values() if p.kind is p.KEYWORD_ONLY]
    fields = [f.name for f in dataclasses.fields(AttentionLayerSpec)]
    assert keywords == [f for f in fields if f in keywords]
    assert keywords[:2] == ["num_kv_heads", "scale"]


def test_keyword_form_builds_the_spec() -> None:
    layer = Attention(8, 16, num_kv_heads=2, scale=0.25, layer_index=3, sliding_window=32)
    assert layer.spec == AttentionLayerSpec(num_heads=8, head_size=16, num_kv_heads=2, scale=0.25, layer_index=3,
                                            sliding_window=32)


def test_positional_form_still_works_with_a_deprecation_warning() -> None:
    with pytest.warns(DeprecationWarning, match="pass num_kv_heads=, scale="):
        layer = Attention(8, 16, 0.25, 2, 3, sliding_window=32)
    assert layer.spec == Attention(8, 16, num_kv_heads=2, scale=0.25, layer_index=3, sliding_window=32).spec


def test_missing_scale_is_named() -> None:
    with pytest.raises(TypeError, match="num_kv_heads= and scale="):
        Attention(8, 16, num_kv_heads=2)
