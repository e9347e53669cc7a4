"""How Gemma 3 and Phi-3 read their configs: layer kinds, per-kind rope, LongRoPE, refusals that say what to do."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from infercore.layers import GemmaRMSNorm, get_rope
from infercore.layers.longrope import longrope_cos_sin_cache
from infercore.models.gemma3_config import FULL, SLIDING, gemma3_layer_settings, gemma3_layer_types
from infercore.models.phi3 import split_fused_rows
from infercore.tiny_models import tiny_config


def test_layer_kinds_from_the_older_sliding_window_pattern() -> None:
    config = SimpleNamespace(num_hidden_layers=7, sliding_window_pattern=3)
    assert gemma3_layer_types(config) == [SLIDING, SLIDING, FULL, SLIDING, SLIDING, FULL, SLIDING]


def test_layer_types_of_the_wrong_length_are_refused() -> None:
    config = SimpleNamespace(num_hidden_layers=3, layer_types=[SLIDING, FULL])
    with pytest.raises(ValueError, match="one entry per layer"):
        gemma3_layer_types(config)


def test_older_configs_give_sliding_layers_the_local_base_and_no_scaling() -> None:
    config = SimpleNamespace(num_hidden_layers=2, layer_types=[SLIDING, FULL], sliding_window=512,
                             rope_theta=1e6, rope_local_base_freq=1e4,
                             rope_scaling={"rope_type": "linear", "factor": 8.0})
    local, global_ = gemma3_layer_settings(config)
    assert (local.sliding_window, local.rope.base, local.rope.scaling) == (512, 1e4, None)
    assert (global_.sliding_window, global_.rope.base) == (None, 1e6)
    assert global_.rope.scaling == {"rope_type": "linear", "factor": 8.0}


def test_transformers_5_configs_keep_rope_per_layer_kind() -> None:
    config = tiny_config("Gemma3ForCausalLM", vocab_size=64)
    settings = gemma3_layer_settings(config)
    assert [s.sliding_window for s in settings] == [8, 8, None]
    assert [s.rope.base for s in settings] == [10000.0, 10000.0, 1000000.0]
    assert settings[0].rope.scaling is None and settings[2].rope.scaling["factor"] == 2.0


def test_gemma_norm_loads_one_plus_the_checkpoint_weight() -> None:
    norm = GemmaRMSNorm(4)
    norm.weight.weight_loader(norm.weight, torch.tensor([0.0, 0.5, -1.0, 2.0]))
    assert norm.weight.tolist() == [1.0, 1.5, 0.0, 3.0]


@pytest.mark.parametrize(("field", "value"), [("attn_logit_softcapping", 50.0),
                                              ("use_bidirectional_attention", True)])
def test_gemma3_refuses_what_it_does_not_compute(field: str, value: object) -> None:
    from infercore.models.gemma3 import Gemma3ForCausalLM

    config = tiny_config("Gemma3ForCausalLM", vocab_size=64, **{field: value})
    with pytest.raises(ValueError, match=field):
        Gemma3ForCausalLM(config, torch.float32)


LONGROPE = {"rope_type": "longrope", "short_factor": [1.0, 2.0], "long_factor": [3.0, 5.0],
            "original_max_position_embeddings": 16}


def test_longrope_uses_short_factors_within_the_original_length_and_long_ones_after() -> None:
    cache = longrope_cos_sin_cache(4, 100.0, 64, LONGROPE)
    scale = math.sqrt(1 + math.log(64 / 16) / math.log(16))
    inv = 1.0 / 100.0 ** (torch.arange(0, 4, 2).float() / 4)
    for pos, factors in ((15, [1.0, 2.0]), (16, [3.0, 5.0]), (63, [3.0, 5.0])):
        angles = pos * inv / torch.tensor(factors)
        torch.testing.assert_close(cache[pos], torch.cat((angles.cos(), angles.sin())) * scale)


def test_longrope_factors_must_match_the_rotary_size() -> None:
    with pytest.raises(ValueError, match="short_factor with 4 entries"):
        get_rope(8, 8, 64, 10000.0, LONGROPE, torch.float32)


def test_fused_checkpoint_rows_are_cut_into_projections_or_refused() -> None:
    fused = torch.arange(10.0).view(5, 2)
    parts = dict(split_fused_rows("m.0.qkv_proj.weight", fused, "qkv_proj", {"q_proj": 3, "k_proj": 1, "v_proj": 1}))
    assert parts["m.0.q_proj.weight"].tolist() == fused[:3].tolist()
    assert parts["m.0.v_proj.weight"].tolist() == fused[4:].tolist()
    with pytest.raises(ValueError, match="does not match the weights"):
        list(split_fused_rows("m.0.qkv_proj.weight", fused, "qkv_proj", {"q_proj": 2, "k_proj": 1, "v_proj": 1}))
