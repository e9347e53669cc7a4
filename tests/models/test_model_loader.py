"""Loading: weight formats, dtypes, tied embeddings, dummy weights and the errors users see."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from paged_harness import PagedHarness
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

from infercore.config import InfercoreConfig
from infercore.models import get_hf_config, load_model, resolve_dtype
from infercore.models.rope_params import rope_settings
from infercore.platforms import current_platform

PROMPT = [3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46, 26, 43, 38, 32, 79, 50, 28, 84]


def load(folder: Path, dtype: torch.dtype = torch.float32, **kwargs: object) -> torch.nn.Module:
    config = InfercoreConfig.from_kwargs(model=str(folder), **kwargs)
    return load_model(config, torch.device("cpu"), dtype)


def prefill_logits(model: torch.nn.Module) -> torch.Tensor:
    return PagedHarness(model).step([(0, PROMPT)])[0]


def hf_logits(folder: Path) -> torch.Tensor:
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    with torch.no_grad():
        return model(torch.tensor([PROMPT])).logits[0]


def relative_error(ours: torch.Tensor, ref: torch.Tensor) -> float:
    return float((ours.float() - ref).abs().max() / ref.abs().max())


def rewrite_weights(src: Path, dst: Path, edit) -> Path:
    """Copy a single-file model folder, passing its tensors through ``edit``."""
    shutil.copytree(src, dst)
    tensors = edit(load_file(str(dst / "model.safetensors")))
    save_file(tensors, str(dst / "model.safetensors"), metadata={"format": "pt"})
    return dst


def test_sharded_safetensors_load(tiny_folder) -> None:
    folder = tiny_folder("Qwen2ForCausalLM", max_shard_size="40KB")
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1
    assert relative_error(prefill_logits(load(folder)), hf_logits(folder)) < 1e-4


def test_pt_bin_fallback(tiny_folder, tmp_path: Path) -> None:
    src = tiny_folder("LlamaForCausalLM")
    dst = tmp_path / "bin"
    shutil.copytree(src, dst)
    torch.save(load_file(str(dst / "model.safetensors")), dst / "pytorch_model.bin")
    (dst / "model.safetensors").unlink()
    assert relative_error(prefill_logits(load(dst, load_format="pt")), hf_logits(src)) < 1e-4


def test_missing_tensor_is_named(tiny_folder, tmp_path: Path) -> None:
    name = "model.layers.1.self_attn.k_proj.weight"
    folder = rewrite_weights(tiny_folder("LlamaForCausalLM"), tmp_path / "m",
                             lambda t: {k: v for k, v in t.items() if k != name})
    with pytest.raises(ValueError, match=name.replace(".", r"\.")):
        load(folder)


def test_unexpected_tensor_is_named(tiny_folder, tmp_path: Path) -> None:
    name = "model.layers.0.mlp.extra_proj.weight"
    folder = rewrite_weights(tiny_folder("LlamaForCausalLM"), tmp_path / "m",
                             lambda t: {**t, name: torch.zeros(2, 2)})
    with pytest.raises(ValueError, match=name.replace(".", r"\.")):
        load(folder)


def test_unknown_architecture_lists_supported(tiny_folder, tmp_path: Path) -> None:
    folder = tmp_path / "m"
    shutil.copytree(tiny_folder("LlamaForCausalLM"), folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["architectures"] = ["FancyForCausalLM"]
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="FancyForCausalLM") as info:
        load(folder)
    assert "Qwen3ForCausalLM" in str(info.value) and "register_models" in str(info.value)


def test_bfloat16_load(tiny_folder) -> None:
    folder = tiny_folder("Qwen3ForCausalLM")
    model = load(folder, torch.bfloat16)
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    logits = prefill_logits(model)
    assert logits.dtype == torch.bfloat16  # the sampler converts where it needs float32
    assert relative_error(logits, hf_logits(folder)) < 5e-2


def test_tied_embeddings(tiny_folder) -> None:
    folder = tiny_folder("Qwen3ForCausalLM", tie_word_embeddings=True)
    model = load(folder)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert relative_error(prefill_logits(model), hf_logits(folder)) < 1e-4


def test_dummy_weights_are_seeded_and_finite(tiny_folder) -> None:
    folder = tiny_folder("MistralForCausalLM")
    a = load(folder, load_format="dummy", seed=1)
    b = load(folder, load_format="dummy", seed=1)
    c = load(folder, load_format="dummy", seed=2)
    assert torch.isfinite(prefill_logits(a)).all()
    pa, pb, pc = (m.model.layers[0].mlp.down_proj.weight for m in (a, b, c))
    assert torch.equal(pa, pb) and not torch.equal(pa, pc)


def test_resolve_dtype(tiny_folder) -> None:
    folder = tiny_folder("LlamaForCausalLM")
    platform = current_platform()
    for name, expected in [("auto", torch.float32), ("bf16", torch.bfloat16), ("half", torch.float16),
                           ("float32", torch.float32)]:
        model_config = InfercoreConfig.from_kwargs(model=str(folder), dtype=name).model
        assert resolve_dtype(model_config, get_hf_config(model_config), platform) == expected


def test_rope_settings_read_old_and_new_config_styles() -> None:
    old = SimpleNamespace(rope_theta=5e5, rope_scaling={"type": "linear", "factor": 2.0})
    new = SimpleNamespace(rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 5e5})
    for cfg in (old, new):
        settings = rope_settings(cfg)
        assert settings.base == 5e5 and settings.scaling["factor"] == 2.0
    assert rope_settings(SimpleNamespace(rope_theta=1e4)).scaling is None
