"""Writes a tiny Qwen3-MoE checkpoint in the HF ``fp8`` format of the Qwen3-30B-A3B-FP8 release (e4m3
weights of every attention and expert projection with a float32 ``weight_scale_inv`` per block; router,
norms, embeddings and head unquantized), with its dequantized float32 twin as the reference."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

FP8 = torch.float8_e4m3fn
#: The tiny Qwen3-MoE shapes the tests build: experts of whole 32-wide blocks, and of a partial last block.
MOE_SHAPES = {"inter64": {"moe_intermediate_size": 64, "num_key_value_heads": 4},
              "inter48": {"moe_intermediate_size": 48, "num_key_value_heads": 4}}
FP8_MAX = 448.0
#: The projections the release quantizes (attention and every expert's; the router ``mlp.gate`` stays).
QUANTIZED = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def block_quantize(w: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(fp8 weight, scale per ``block`` x ``block`` block with partial blocks at the edges, dequantized
    float32 weight), written out here rather than taken from infercore."""
    n, k = w.shape
    rows, cols = -(-n // block), -(-k // block)
    scale = torch.empty(rows, cols)
    for r in range(rows):
        for c in range(cols):
            tile = w[r * block:(r + 1) * block, c * block:(c + 1) * block]
            scale[r, c] = max(float(tile.abs().max()) / FP8_MAX, 1e-12)
    per_element = scale.repeat_interleave(block, 0)[:n].repeat_interleave(block, 1)[:, :k]
    q = (w / per_element).clamp(-FP8_MAX, FP8_MAX).to(FP8)
    return q, scale, q.float() * per_element


def write_fp8_moe_pair(src: Path, dst: Path, block: int) -> tuple[Path, Path]:
    """(the FP8 checkpoint of the float32 model folder ``src`` with ``block`` x ``block`` scale blocks, its
    dequantized float32 twin)."""
    quantized, reference = dst / f"fp8-block{block}", dst / f"dequantized-block{block}"
    for folder in (quantized, reference):
        shutil.copytree(src, folder)
    q_tensors, ref_tensors = {}, {}
    for name, tensor in load_file(str(src / "model.safetensors")).items():
        module = name.removesuffix(".weight")
        if name.endswith(".weight") and module.split(".")[-1] in QUANTIZED:
            q, scale, dequantized = block_quantize(tensor.float(), block)
            q_tensors[name], q_tensors[f"{module}.weight_scale_inv"] = q, scale
            ref_tensors[name] = dequantized
        else:
            q_tensors[name] = ref_tensors[name] = tensor
    save_file(q_tensors, str(quantized / "model.safetensors"), metadata={"format": "pt"})
    save_file(ref_tensors, str(reference / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((quantized / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                     "weight_block_size": [block, block], "modules_to_not_convert": ["lm_head"]}
    (quantized / "config.json").write_text(json.dumps(config, indent=2))
    return quantized, reference


def write_online_twin(src: Path, dst: Path, block: int) -> Path:
    """The float32 model folder ``src`` with its weights as ``--quantization fp8`` leaves them: quantized in
    ``block`` x ``block`` blocks of each layer's parameter (q, k and v stacked in one; each expert's gate
    and up projection apart, as their own block rows) and dequantized."""
    shutil.copytree(src, dst)
    tensors = load_file(str(src / "model.safetensors"))
    out = dict(tensors)
    for name, tensor in tensors.items():
        module = name.removesuffix(".weight")
        kind = module.split(".")[-1]
        if kind == "q_proj" and name.endswith(".weight"):
            parts = [tensors[name.replace("q_proj", p)].float() for p in ("q_proj", "k_proj", "v_proj")]
            fused = block_quantize(torch.cat(parts), block)[2]
            for p, piece in zip(("q_proj", "k_proj", "v_proj"), fused.split([t.shape[0] for t in parts])):
                out[name.replace("q_proj", p)] = piece.contiguous()
        elif kind in ("o_proj", "gate_proj", "up_proj", "down_proj") and name.endswith(".weight"):
            out[name] = block_quantize(tensor.float(), block)[2]
    save_file(out, str(dst / "model.safetensors"), metadata={"format": "pt"})
    return dst
