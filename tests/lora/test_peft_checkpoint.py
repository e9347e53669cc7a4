"""PEFT adapters are read with their scaling, and an adapter that does not fit is refused at load,
with an error that names what does not fit."""

from __future__ import annotations

import json
import math

import pytest
import torch
from lora_cases import ADAPTERS, AdapterCase, write_adapter
from safetensors.torch import load_file, save_file
from transformers import AutoConfig

from infercore import LoRARequest
from infercore.config import InfercoreConfig
from infercore.lora.checks import AdapterChecker
from infercore.lora.peft_checkpoint import LoRAError, load_adapter


@pytest.fixture(scope="module")
def base(tiny_model_factory):
    return tiny_model_factory("LlamaForCausalLM")


@pytest.fixture(scope="module")
def hf_config(base):
    return AutoConfig.from_pretrained(str(base))


@pytest.fixture
def adapter(base, tmp_path):
    return write_adapter(base, tmp_path / "a", ADAPTERS[0], seed=1)


def _edit_config(folder, **changes) -> None:
    path = folder / "adapter_config.json"
    cfg = json.loads(path.read_text())
    cfg.update(changes)
    path.write_text(json.dumps(cfg))


def test_scaling_is_alpha_over_rank_or_over_its_root_with_rslora(base, hf_config, tmp_path):
    plain = load_adapter("a", write_adapter(base, tmp_path / "a", ADAPTERS[0], seed=1), 16, hf_config)
    assert plain.spec.scaling == pytest.approx(8.0 / 4)
    rs = load_adapter("b", write_adapter(base, tmp_path / "b", ADAPTERS[1], seed=2), 16, hf_config)
    assert rs.spec.scaling == pytest.approx(4.0 / math.sqrt(8))
    raw = load_file(str(tmp_path / "b" / "adapter_model.safetensors"))
    a, b = rs.weights[(0, "q_proj")]
    key = next(k for k in raw if "layers.0.self_attn.q_proj.lora_B" in k)
    assert torch.equal(b, raw[key] * rs.spec.scaling) and a.shape == (8, 64)


def test_rank_above_max_lora_rank_is_refused(adapter, hf_config):
    with pytest.raises(LoRAError, match="rank 4 is above max_lora_rank 2"):
        load_adapter("a", adapter, 2, hf_config)


def test_modules_to_save_is_refused(adapter, hf_config):
    _edit_config(adapter, modules_to_save=["lm_head"])
    with pytest.raises(LoRAError, match="modules_to_save"):
        load_adapter("a", adapter, 16, hf_config)


def test_an_unsupported_target_module_is_named(base, hf_config, tmp_path):
    folder = write_adapter(base, tmp_path / "x", AdapterCase("x", 2, 2.0, ("q_proj",)), seed=3)
    path = folder / "adapter_model.safetensors"
    tensors = load_file(str(path))
    tensors["base_model.model.model.layers.0.mlp.act_fn.lora_A.weight"] = torch.zeros(2, 64)
    save_file(tensors, str(path))
    with pytest.raises(LoRAError, match="target module 'act_fn'"):
        load_adapter("x", folder, 16, hf_config)


def test_an_adapter_for_another_base_shape_is_refused(adapter, tiny_model_factory):
    other = AutoConfig.from_pretrained(str(tiny_model_factory("LlamaForCausalLM", hidden_size=32)))
    with pytest.raises(LoRAError, match=r"\(64, 4\) but the base model.s down_proj needs \(32, 4\).*another base"):
        load_adapter("a", adapter, 16, other)


def test_a_missing_folder_says_what_it_needs(hf_config, tmp_path):
    with pytest.raises(LoRAError, match="no adapter_config.json"):
        load_adapter("gone", tmp_path / "gone", 16, hf_config)


def test_the_front_end_refuses_before_the_engine(base, adapter):
    off = AdapterChecker(InfercoreConfig.from_kwargs(model=str(base)))
    with pytest.raises(LoRAError, match="enable_lora"):
        off.check(LoRARequest("a", 1, str(adapter)))
    on = AdapterChecker(InfercoreConfig.from_kwargs(model=str(base), enable_lora=True, max_lora_rank=8))
    on.check(LoRARequest("a", 1, str(adapter)))
    with pytest.raises(LoRAError, match="lora_int_id 1 already names adapter 'a'"):
        on.check(LoRARequest("other", 1, "/elsewhere"))
    with pytest.raises(ValueError, match="positive"):
        LoRARequest("zero", 0, str(adapter))


def test_mixture_of_experts_models_take_attention_adapters_only(tiny_model_factory, tmp_path):
    from infercore import LLM, SamplingParams

    base = tiny_model_factory("MixtralForCausalLM")
    config = AutoConfig.from_pretrained(str(base))
    attention = write_adapter(base, tmp_path / "b", ADAPTERS[1], seed=2)
    load_adapter("b", attention, 16, config)
    mlp = write_adapter(base, tmp_path / "m", AdapterCase("m", 2, 2.0, ("q_proj",)), seed=3)
    path = mlp / "adapter_model.safetensors"
    tensors = load_file(str(path))
    tensors["base_model.model.model.layers.0.mlp.down_proj.lora_A.weight"] = torch.zeros(2, 128)
    save_file(tensors, str(path))
    with pytest.raises(LoRAError, match="mixture-of-experts"):
        load_adapter("m", mlp, 16, config)
    llm = LLM(model=str(base), dtype="float32", max_model_len=128, cpu_threads=1, enable_lora=True, max_lora_rank=8)
    try:
        out = llm.generate("hello world", SamplingParams(max_tokens=4, temperature=0), use_tqdm=False,
                           lora_request=LoRARequest("b", 1, str(attention)))
    finally:
        llm.llm_engine.engine_core.shutdown()
    assert len(out[0].outputs[0].token_ids) == 4
