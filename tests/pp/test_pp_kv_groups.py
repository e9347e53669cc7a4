"""A later pipeline stage's KV cache: the groups (and block tables) are the whole model's, the caches and
the memory only its own layers'. Here stage 1 of a Gemma-3-like model of two sliding layers and one
global layer holds the global layer alone."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from infercore.attention import Attention
from infercore.attention.binding import bind_attention, layer_specs
from infercore.attention.reference_backend import ReferenceAttentionBackend
from infercore.config import InfercoreConfig
from infercore.layers import pipeline_parallel
from infercore.layers.pipeline_parallel import PipelineState
from infercore.worker.kv_cache_setup import KVCacheSetup


class StageOne(nn.Module):
    """The attention of global layer 2, the only layer stage 1 holds."""

    def __init__(self) -> None:
        super().__init__()
        self.attn = Attention(4, 16, num_kv_heads=2, scale=0.25, layer_index=2)


def test_stage_caches_only_its_layers_in_the_whole_models_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    stage = PipelineState(rank=1, size=2)
    # Stage 0 holds two layers sliding over 8 tokens; this stage's windows are its own.
    monkeypatch.setattr(stage, "gather_objects", lambda windows: [[8, 8], windows])
    monkeypatch.setattr(pipeline_parallel, "_state", stage)
    model = StageOne()
    config = InfercoreConfig.from_kwargs(block_size=16)
    setup = KVCacheSetup(config, None, torch.device("cpu"), model, torch.float32, max_num_reqs=4,
                         max_num_tokens=64, max_model_len=128)
    assert [(g.window, g.layers) for g in setup.groups] == [(None, (2,)), (8, (0, 1))]
    assert setup.first_layer == 2 and setup.layer_groups == [0]
    layout = setup.layout(20)
    assert layout.pool_sizes[0] == 20
    # Memory for one layer of the primary pool, none for the sliding group's layers (on stage 0).
    assert setup.stage_bytes(20) == setup.spec.page_size_bytes * 20
    caches = setup.allocate(ReferenceAttentionBackend, layout.pool_sizes)
    assert len(caches) == 1 and caches[0].shape == ReferenceAttentionBackend.get_kv_cache_shape(20, 16, 2, 16)
    bind_attention(model, ReferenceAttentionBackend, caches, torch.float32, layer_groups=setup.layer_groups)
    assert model.attn.kv_cache is caches[0] and model.attn.kv_group == 0
    assert len(layer_specs(model)) == 1
