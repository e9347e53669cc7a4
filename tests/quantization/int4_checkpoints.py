"""Writes 4-bit AWQ and GPTQ checkpoints of a tiny model folder, each with its dequantized twin.

The packers here follow the formats' own definitions, written independently of infercore's
unpacking (one int32 at a time, nibble by nibble):

* AWQ (AutoAWQ ``WQLinear_GEMM``): ``qweight`` [in, out/8] and ``qzeros`` [groups, out/8]; nibble
  ``i`` (bits 4i..4i+3) of int32 ``c`` holds output column ``8c + AWQ_ORDER[i]``; ``scales``
  [groups, out] fp16; ``w = (q - zero) * scale``.
* GPTQ (AutoGPTQ, ``checkpoint_format: gptq``): ``qweight`` [in/8, out], nibble ``i`` of row ``r``
  holding input row ``8r + i``; ``qzeros`` [groups, out/8] sequential along the output, storing
  ``zero - 1``; ``scales`` [groups, out] fp16; ``g_idx`` [in] the group of each input row.

Weights are rounded to the nearest code per group (asymmetric: 16 levels between the group's min and
max; symmetric: zero 8). The twin holds ``(q - zero) * scale`` in float32, unquantized.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
#: A layer every format's ignore list keeps unquantized.
IGNORED = "model.layers.1.mlp.down_proj"


@dataclass(frozen=True)
class Int4Scheme:
    """One checkpoint variant: format, group size, symmetric or not, act-order or not."""

    method: str  # "awq", "gptq" or "compressed-tensors"
    group_size: int
    sym: bool = False
    desc_act: bool = False

    @property
    def name(self) -> str:
        return f"{self.method.replace('compressed-tensors', 'ct')}-g{self.group_size}{'-sym' if self.sym else ''}{'-actorder' if self.desc_act else ''}"

    def quantization_config(self) -> dict:
        if self.method == "compressed-tensors":
            weights = {"num_bits": 4, "type": "int", "symmetric": self.sym, "dynamic": False,
                       "strategy": "channel" if self.group_size == -1 else "group",
                       "group_size": None if self.group_size == -1 else self.group_size}
            return {"quant_method": "compressed-tensors", "format": "pack-quantized",
                    "quantization_status": "compressed", "ignore": ["lm_head", IGNORED],
                    "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights}}}
        if self.method == "awq":
            return {"quant_method": "awq", "bits": 4, "group_size": self.group_size, "zero_point": True,
                    "version": "gemm", "modules_to_not_convert": [IGNORED]}
        return {"quant_method": "gptq", "bits": 4, "group_size": self.group_size, "desc_act": self.desc_act,
                "sym": self.sym, "checkpoint_format": "gptq", "static_groups": False, "true_sequential": True,
                "damp_percent": 0.01, "modules_to_not_convert": [IGNORED]}


def to_int32(word: int) -> int:
    """An unsigned 32-bit word as the int32 a tensor stores."""
    return word - (1 << 32) if word >= 1 << 31 else word


def pack_awq_word_by_word(codes: torch.Tensor) -> torch.Tensor:
    """Codes [rows, cols] into AWQ's int32 [rows, cols/8], one word at a time as the format describes it."""
    rows, cols = codes.shape
    out = torch.zeros(rows, cols // 8, dtype=torch.int32)
    for r in range(rows):
        for c in range(cols // 8):
            word = 0
            for i in range(8):
                word |= int(codes[r, 8 * c + AWQ_ORDER[i]]) << (4 * i)
            out[r, c] = to_int32(word)
    return out


def pack_gptq_rows_word_by_word(codes: torch.Tensor) -> torch.Tensor:
    """Codes [rows, cols] into GPTQ's ``qweight`` int32 [rows/8, cols] (eight rows per word), one word at a time."""
    rows, cols = codes.shape
    out = torch.zeros(rows // 8, cols, dtype=torch.int32)
    for r in range(rows // 8):
        for c in range(cols):
            out[r, c] = to_int32(sum(int(codes[8 * r + i, c]) << (4 * i) for i in range(8)))
    return out


def _words(nibbles: torch.Tensor) -> torch.Tensor:
    """[..., 8] codes (nibble ``i`` last-dim entry ``i``) as int32 words, the same bits as :func:`to_int32`."""
    shifts = torch.arange(0, 32, 4, dtype=torch.int64)
    words = (nibbles.to(torch.int64) << shifts).sum(-1)
    return torch.where(words >= 1 << 31, words - (1 << 32), words).to(torch.int32)


def pack_awq(codes: torch.Tensor) -> torch.Tensor:
    """Codes [rows, cols] into AWQ's int32 [rows, cols/8] (:func:`pack_awq_word_by_word`'s words, whole tensors at
    a time: a model-sized checkpoint packs in seconds)."""
    rows, cols = codes.shape
    return _words(codes.reshape(rows, cols // 8, 8)[:, :, list(AWQ_ORDER)])


def pack_gptq_rows(codes: torch.Tensor) -> torch.Tensor:
    """Codes [rows, cols] into GPTQ's ``qweight`` int32 [rows/8, cols] (:func:`pack_gptq_rows_word_by_word`'s
    words, whole tensors at a time)."""
    rows, cols = codes.shape
    return _words(codes.reshape(rows // 8, 8, cols).transpose(1, 2))


def pack_gptq_columns(codes: torch.Tensor) -> torch.Tensor:
    """Codes [rows, cols] into GPTQ's ``qzeros`` int32 [rows, cols/8] (eight columns per word)."""
    return pack_gptq_rows(codes.t().contiguous()).t().contiguous()


def compressed_tensors_w4a16(codes: torch.Tensor, zeros: torch.Tensor, scales: torch.Tensor,
                             sym: bool) -> dict[str, torch.Tensor]:
    """The ``pack-quantized`` tensors of codes [in, out], zeros and scales [groups, out], packed by the
    compressed-tensors package itself (signed values stored plus 8; weights along the input, zero-points
    along the output)."""
    from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32

    signed = (codes.to(torch.int16) - 8).to(torch.int8).t().contiguous()
    tensors = {"weight_packed": pack_to_int32(signed, 4), "weight_scale": scales.t().contiguous(),
               "weight_shape": torch.tensor(list(signed.shape))}
    if not sym:
        signed_zeros = (zeros.to(torch.int16) - 8).to(torch.int8).t().contiguous()
        tensors["weight_zero_point"] = pack_to_int32(signed_zeros, 4, packed_dim=0)
    return tensors


def act_order(k: int, group_size: int, seed: int) -> torch.Tensor:
    """A ``g_idx`` [k] as act-order quantization leaves it: the i-th row in a random order is in group
    ``i // group_size``."""
    perm = torch.randperm(k, generator=torch.Generator().manual_seed(seed))
    g_idx = torch.empty(k, dtype=torch.int32)
    g_idx[perm] = (torch.arange(k) // group_size).to(torch.int32)
    return g_idx


def quantize(w_kn: torch.Tensor, g_idx: torch.Tensor, groups: int, scheme: Int4Scheme
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Round ``w_kn`` [in, out] per group: (codes [in, out], zeros [groups, out], fp16 scales [groups, out])."""
    scales = torch.empty(groups, w_kn.shape[1])
    zeros = torch.empty(groups, w_kn.shape[1])
    for g in range(groups):
        rows = w_kn[g_idx == g]
        lo, hi = rows.amin(0).clamp(max=0), rows.amax(0).clamp(min=0)
        if scheme.sym:
            scales[g], zeros[g] = torch.maximum(-lo, hi) / 7.5, 8
        else:
            scales[g] = (hi - lo) / 15
            # GPTQ's stored zero is one less than the zero: 0 cannot be stored, so its zeros start at 1.
            zeros[g] = (-lo / scales[g]).round().clamp(1 if scheme.method == "gptq" else 0, 15)
    scales = scales.half()
    per_row_s, per_row_z = scales.float()[g_idx.long()], zeros[g_idx.long()]
    codes = (w_kn / per_row_s + per_row_z).round().clamp(0, 15)
    return codes.to(torch.uint8), zeros.to(torch.uint8), scales


def _quantized_tensors(module: str, w: torch.Tensor, layer_key: str, scheme: Int4Scheme
                       ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """The checkpoint tensors of linear ``module`` with weight ``w`` [out, in], and its dequantized twin."""
    k = w.shape[1]
    group = k if scheme.group_size == -1 else scheme.group_size
    if scheme.desc_act:
        # Projections of one input (q/k/v; gate/up) share act-order, as GPTQ's Hessian is the input's.
        g_idx = act_order(k, group, seed=sum(map(ord, layer_key)))
    else:
        g_idx = (torch.arange(k) // group).to(torch.int32)
    codes, zeros, scales = quantize(w.float().t(), g_idx, k // group, scheme)
    twin = ((codes.float() - zeros.float()[g_idx.long()]) * scales.float()[g_idx.long()]).t().contiguous()
    if scheme.method == "awq":
        tensors = {"qweight": pack_awq(codes), "qzeros": pack_awq(zeros), "scales": scales}
    elif scheme.method == "compressed-tensors":
        tensors = compressed_tensors_w4a16(codes, zeros, scales, scheme.sym)
    else:
        tensors = {"qweight": pack_gptq_rows(codes), "qzeros": pack_gptq_columns(zeros - 1), "scales": scales,
                   "g_idx": g_idx}
    return {f"{module}.{n}": t for n, t in tensors.items()}, twin


def _input_key(module: str) -> str:
    """Which input a projection reads: projections of one key are fused and share act-order."""
    layer, name = module.rsplit(".", 1)
    return layer + {"k_proj": ".q_proj", "v_proj": ".q_proj", "up_proj": ".gate_proj"}.get(name, "." + name)


def write_int4_pair(src: Path, dst: Path, scheme: Int4Scheme) -> tuple[Path, Path]:
    """(the 4-bit checkpoint of ``src`` in ``scheme``, its dequantized float32 twin)."""
    quantized, reference = dst / scheme.name, dst / f"dequantized-{scheme.name}"
    for folder in (quantized, reference):
        shutil.copytree(src, folder)
    q_tensors, ref_tensors = {}, {}
    for name, tensor in load_file(str(src / "model.safetensors")).items():
        module = name.removesuffix(".weight")
        if name.endswith(".weight") and module.split(".")[-1] in LINEARS and module != IGNORED:
            packed, twin = _quantized_tensors(module, tensor, _input_key(module), scheme)
            q_tensors.update(packed)
            ref_tensors[name] = twin
        else:
            q_tensors[name] = ref_tensors[name] = tensor
    save_file(q_tensors, str(quantized / "model.safetensors"), metadata={"format": "pt"})
    save_file(ref_tensors, str(reference / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((quantized / "config.json").read_text())
    config["quantization_config"] = scheme.quantization_config()
    (quantized / "config.json").write_text(json.dumps(config, indent=2))
    return quantized, reference
