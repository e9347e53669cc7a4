"""Top-k routing gives the experts and weights of the HF routers it replaces."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig
from transformers.models.mixtral.modeling_mixtral import MixtralTopKRouter
from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeTopKRouter

from infercore.layers.fused_moe import select_experts

HIDDEN, EXPERTS, TOP_K = 32, 8, 3


def hf_router(model_type: str, **kwargs: object) -> torch.nn.Module:
    config = AutoConfig.for_model(model_type, hidden_size=HIDDEN, num_experts_per_tok=TOP_K, **kwargs)
    cls = Qwen3MoeTopKRouter if model_type == "qwen3_moe" else MixtralTopKRouter
    router = cls(config)
    with torch.no_grad():
        router.weight.normal_()
    return router


@pytest.mark.parametrize(("model_type", "kwargs", "renormalize"), [
    ("qwen3_moe", {"num_experts": EXPERTS, "norm_topk_prob": True}, True),
    ("qwen3_moe", {"num_experts": EXPERTS, "norm_topk_prob": False}, False),
    ("mixtral", {"num_local_experts": EXPERTS}, True),
], ids=["qwen3-norm-topk", "qwen3-raw-topk", "mixtral"])
def test_select_experts_matches_hf_router(model_type: str, kwargs: dict, renormalize: bool) -> None:
    torch.manual_seed(0)
    router = hf_router(model_type, **kwargs)
    x = torch.randn(20, HIDDEN)
    _, hf_weights, hf_ids = router(x)
    weights, ids = select_experts(torch.nn.functional.linear(x, router.weight), TOP_K, renormalize)
    assert ids.dtype == torch.int32 and weights.dtype == torch.float32
    assert torch.equal(ids.long(), hf_ids)
    torch.testing.assert_close(weights, hf_weights.float())
    sums = weights.sum(-1)
    assert torch.allclose(sums, torch.ones_like(sums)) == renormalize


def test_select_experts_refuses_more_experts_than_exist() -> None:
    with pytest.raises(ValueError, match="cannot route each token to 5 of 4 experts"):
        select_experts(torch.randn(2, 4), 5, True)
