"""PEFT LoRA checkpoints (``adapter_config.json`` + ``adapter_model.safetensors``), read and checked
against the base model before any of it reaches a device.

An adapter fits when every tensor it holds is a ``lora_A`` / ``lora_B`` of a projection the dense
decoders have (q/k/v/o, gate/up/down, or Phi-3's fused ``qkv_proj`` / ``gate_up_proj``), its rank is at
most ``max_lora_rank`` and each matrix has the base projection's shape. Anything else is refused at
load with an error that names what does not fit.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infercore.lora.target_modules import TARGET_MODULES, module_shapes

if TYPE_CHECKING:
    import torch


class LoRAError(ValueError):
    """An adapter that can't be served; the message names the adapter and what does not fit."""


CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
#: ``...layers.<i>.<block>.<module>.lora_<A|B>[.<adapter name>].weight`` as PEFT saves it.
_KEY = re.compile(r"layers\.(\d+)\.\w+\.(\w+)\.lora_([AB])(?:\.\w+)?\.weight$")


@dataclass(frozen=True)
class AdapterSpec:
    """What ``adapter_config.json`` says: rank, scaling (``lora_alpha / r``, or ``/ sqrt(r)`` with rsLoRA)."""

    rank: int
    scaling: float
    target_modules: tuple[str, ...]


@dataclass(frozen=True)
class PeftAdapter:
    """A loaded adapter: ``weights[(layer, module)] = (A [r, in], B [out, r] with the scaling folded in)``."""

    name: str
    spec: AdapterSpec
    weights: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]]


def _refuse(name: str, what: str) -> LoRAError:
    return LoRAError(f"LoRA adapter {name!r}: {what}")


def read_spec(name: str, path: str | Path, max_rank: int) -> AdapterSpec:
    """Parse and check ``adapter_config.json`` of the adapter folder ``path``."""
    folder = Path(path)
    config_file = folder / CONFIG_FILE
    if not config_file.is_file():
        raise _refuse(name, f"no {CONFIG_FILE} in {str(folder)!r}; give the folder of a PEFT LoRA adapter")
    if not (folder / WEIGHTS_FILE).is_file():
        raise _refuse(name, f"no {WEIGHTS_FILE} in {str(folder)!r}; save the adapter with safe_serialization")
    cfg: dict[str, Any] = json.loads(config_file.read_text())
    peft_type = str(cfg.get("peft_type", "LORA")).upper()
    if peft_type != "LORA":
        raise _refuse(name, f"peft_type is {peft_type}; only LORA adapters are served")
    if cfg.get("modules_to_save"):
        raise _refuse(name, f"modules_to_save {cfg['modules_to_save']} replaces whole base modules, which a batch "
                            "shared with other adapters cannot do; train the adapter without modules_to_save")
    for key, what in (("use_dora", "DoRA"), ("rank_pattern", "per-module ranks (rank_pattern)"),
                      ("alpha_pattern", "per-module alphas (alpha_pattern)")):
        if cfg.get(key):
            raise _refuse(name, f"{what} is not supported; use one rank and alpha for every module")
    if cfg.get("bias", "none") != "none":
        raise _refuse(name, f"bias={cfg['bias']!r} trains base biases; only bias='none' adapters are served")
    rank = int(cfg.get("r", 8))
    if rank > max_rank:
        raise _refuse(name, f"rank {rank} is above max_lora_rank {max_rank}; raise --max-lora-rank")
    alpha = float(cfg.get("lora_alpha", rank))
    scaling = alpha / math.sqrt(rank) if cfg.get("use_rslora") else alpha / rank
    targets = cfg.get("target_modules") or []
    targets = (targets,) if isinstance(targets, str) else tuple(targets)
    return AdapterSpec(rank=rank, scaling=scaling, target_modules=targets)


def _check_key(name: str, key: str, num_layers: int) -> tuple[int, str, str]:
    match = _KEY.search(key)
    if match is None:
        raise _refuse(name, f"tensor {key!r} is not the lora_A/lora_B of a decoder layer's projection; "
                            "only q/k/v/o and gate/up/down projections can carry LoRA")
    layer, module, which = int(match.group(1)), match.group(2), match.group(3)
    if module not in TARGET_MODULES:
        raise _refuse(name, f"target module {module!r} ({key}) is not supported; LoRA applies to "
                            f"{', '.join(TARGET_MODULES)}")
    if layer >= num_layers:
        raise _refuse(name, f"tensor {key!r} is for layer {layer} but the base model has {num_layers} layers")
    return layer, module, which


def check_shapes(name: str, spec: AdapterSpec, shapes: dict[str, tuple[int, ...]], hf_config: Any) -> None:
    """Refuse an adapter whose tensors (``shapes``: key → shape) don't fit the base model ``hf_config``."""
    text = getattr(hf_config, "get_text_config", lambda: hf_config)()
    expected = module_shapes(text)
    experts = bool(getattr(text, "num_experts", None) or getattr(text, "num_local_experts", None))
    for key, shape in shapes.items():
        layer, module, which = _check_key(name, key, int(text.num_hidden_layers))
        if experts and TARGET_MODULES[module].layer_path.startswith("mlp."):
            raise _refuse(name, f"target module {module!r} ({key}) is in a mixture-of-experts block; LoRA applies "
                                "to the attention projections of such models")
        in_size, out_size = expected[module]
        rank = shape[0] if which == "A" else shape[-1]
        want = (rank, in_size) if which == "A" else (out_size, rank)
        if rank != spec.rank:
            raise _refuse(name, f"{key} has rank {rank} but adapter_config.json says r={spec.rank}")
        if tuple(shape) != want:
            raise _refuse(name, f"{key} has shape {tuple(shape)} but the base model's {module} needs {want}; "
                                "the adapter was trained for another base model")


def read_shapes(name: str, path: str | Path) -> dict[str, tuple[int, ...]]:
    """Tensor shapes of the adapter's safetensors file, without reading the tensors (or importing torch: the API
    server checks adapters with this)."""
    from safetensors import safe_open

    try:
        with safe_open(str(Path(path) / WEIGHTS_FILE), framework="numpy") as f:
            return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118
    except Exception as exc:
        raise _refuse(name, f"cannot read {WEIGHTS_FILE}: {exc}") from exc


def check_adapter(name: str, path: str | Path, max_rank: int, hf_config: Any) -> AdapterSpec:
    """Everything :func:`load_adapter` checks, from the config and the file header alone."""
    spec = read_spec(name, path, max_rank)
    check_shapes(name, spec, read_shapes(name, path), hf_config)
    return spec


def load_adapter(name: str, path: str | Path, max_rank: int, hf_config: Any) -> PeftAdapter:
    """Read and check an adapter; the tensors stay on the host, in float32."""
    from safetensors.torch import load_file

    spec = check_adapter(name, path, max_rank, hf_config)
    tensors = load_file(str(Path(path) / WEIGHTS_FILE))
    text = getattr(hf_config, "get_text_config", lambda: hf_config)()
    pairs: dict[tuple[int, str], dict[str, torch.Tensor]] = {}
    for key, tensor in tensors.items():
        layer, module, which = _check_key(name, key, int(text.num_hidden_layers))
        pairs.setdefault((layer, module), {})[which] = tensor.float()
    weights = {}
    for (layer, module), pair in pairs.items():
        if set(pair) != {"A", "B"}:
            raise _refuse(name, f"layer {layer} {module} has lora_{''.join(pair)} without its partner")
        weights[(layer, module)] = (pair["A"], pair["B"] * spec.scaling)
    return PeftAdapter(name=name, spec=spec, weights=weights)
