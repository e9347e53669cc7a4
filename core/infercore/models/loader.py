"""Builds the model for a config: architecture from the model registry, weights from the checkpoint."""

from __future__ import annotations

import torch
from torch import nn

from infercore.config import InfercoreConfig
from infercore.layers import RMSNorm
from infercore.models.hf_config import get_hf_config, resolve_model_path
from infercore.models.weight_files import iterate_weights
from infercore.plugins import get_plugin_manager

DUMMY_WEIGHT_RANGE = 0.05


def model_class(architecture: str) -> type[nn.Module]:
    """The registered class for a HF architecture name, or an error listing the supported ones."""
    registry = get_plugin_manager().registry("model")
    if architecture not in registry:
        raise ValueError(
            f"model architecture {architecture!r} is not supported; supported architectures: "
            f"{', '.join(registry.names()) or 'none'}. To add one, write a plugin whose register_models hook "
            f"calls register({architecture!r}, 'your_package.module:YourModelClass')."
        )
    return registry.load(architecture)


def init_dummy_weights(model: nn.Module, seed: int) -> None:
    """Random weights, the same for a seed whatever the device: norm scales 1, the rest uniform."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            for param in module.parameters(recurse=False):
                if isinstance(module, RMSNorm):
                    param.fill_(1.0)
                else:
                    values = torch.rand(param.shape, generator=generator) * 2 - 1
                    param.copy_(values * DUMMY_WEIGHT_RANGE)


def load_model(config: InfercoreConfig, device: torch.device, dtype: torch.dtype) -> nn.Module:
    """The model of ``config.model`` on ``device`` in ``dtype``, in eval mode, weights loaded
    (or random with ``load_format="dummy"``)."""
    hf_config = get_hf_config(config.model, config.load.download_dir)
    architectures = getattr(hf_config, "architectures", None) or []
    if not architectures:
        raise ValueError(f"the config of {config.model.model!r} names no architecture (config.json lacks "
                         "'architectures'); add it, e.g. [\"LlamaForCausalLM\"]")
    cls = model_class(architectures[0])
    with torch.device(device):
        model = cls(hf_config, dtype)
    if config.load.load_format == "dummy":
        init_dummy_weights(model, config.model.seed)
    else:
        folder = resolve_model_path(config.model, config.load.download_dir)
        model.load_weights(iterate_weights(folder, config.load.load_format))
    return model.eval()
