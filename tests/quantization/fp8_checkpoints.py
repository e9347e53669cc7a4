"""Writes FP8 checkpoints of a tiny model folder, in the HF ``fp8`` and compressed-tensors formats, each
with its dequantized twin (the same weights as float32, unquantized) as the reference."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
#: A layer every format's ignore list keeps unquantized.
IGNORED = "model.layers.1.mlp.down_proj"
BLOCK = 32


def _block_scales(w: torch.Tensor) -> torch.Tensor:
    """One scale per BLOCK x BLOCK block (the test's shapes are whole blocks)."""
    n, k = w.shape
    blocks = w.reshape(n // BLOCK, BLOCK, k // BLOCK, BLOCK)
    return blocks.abs().amax(dim=(1, 3)) / FP8_MAX


def _per_element(scale: torch.Tensor, w: torch.Tensor, scheme: str) -> torch.Tensor:
    if scheme == "block":
        return scale.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)
    return scale.reshape(-1, 1).expand_as(w) if scheme == "channel" else scale.expand_as(w)


def _scale(w: torch.Tensor, scheme: str) -> torch.Tensor:
    if scheme == "block":
        return _block_scales(w)
    if scheme == "channel":
        return w.abs().amax(dim=1, keepdim=True) / FP8_MAX
    return (w.abs().amax() / FP8_MAX).reshape(1)


def quantization_config(scheme: str) -> dict:
    """The ``quantization_config`` a checkpoint of ``scheme`` (block, channel or tensor) carries."""
    if scheme == "block":
        return {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
                "weight_block_size": [BLOCK, BLOCK], "modules_to_not_convert": ["lm_head", IGNORED]}
    weights = {"num_bits": 8, "type": "float", "strategy": scheme, "dynamic": False, "symmetric": True}
    inputs = {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True, "symmetric": True}
    return {"quant_method": "compressed-tensors", "format": "float-quantized", "quantization_status": "compressed",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights, "input_activations": inputs}},
            "ignore": ["lm_head", IGNORED]}


def write_fp8_pair(src: Path, dst: Path, scheme: str) -> tuple[Path, Path]:
    """(the FP8 checkpoint of ``src`` in ``scheme``, its dequantized float32 twin)."""
    quantized, reference = dst / f"fp8-{scheme}", dst / f"dequantized-{scheme}"
    for folder in (quantized, reference):
        shutil.copytree(src, folder)
    q_tensors, ref_tensors = {}, {}
    scale_name = "weight_scale_inv" if scheme == "block" else "weight_scale"
    for name, tensor in load_file(str(src / "model.safetensors")).items():
        module = name.removesuffix(".weight")
        if name.endswith(".weight") and module.split(".")[-1] in LINEARS and module != IGNORED:
            w = tensor.float()
            scale = _scale(w, scheme)
            per_element = _per_element(scale, w, scheme)
            q = (w / per_element).clamp(-FP8_MAX, FP8_MAX).to(FP8)
            q_tensors[name], q_tensors[f"{module}.{scale_name}"] = q, scale.float()
            ref_tensors[name] = q.float() * per_element
        else:
            q_tensors[name] = ref_tensors[name] = tensor
    save_file(q_tensors, str(quantized / "model.safetensors"), metadata={"format": "pt"})
    save_file(ref_tensors, str(reference / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((quantized / "config.json").read_text())
    config["quantization_config"] = quantization_config(scheme)
    (quantized / "config.json").write_text(json.dumps(config, indent=2))
    return quantized, reference
