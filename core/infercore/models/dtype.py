"""Turns the ``dtype`` setting into a torch dtype the platform supports."""

from __future__ import annotations

import torch
from transformers import PretrainedConfig

from infercore.config import ModelConfig
from infercore.platforms import Platform

DTYPE_NAMES: dict[str, torch.dtype] = {
    "float32": torch.float32, "float": torch.float32, "fp32": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "half": torch.float16, "fp16": torch.float16,
}


def _checkpoint_dtype(hf_config: PretrainedConfig) -> torch.dtype | None:
    raw = getattr(hf_config, "dtype", None) or getattr(hf_config, "torch_dtype", None)
    if isinstance(raw, str):
        return DTYPE_NAMES.get(raw.removeprefix("torch."))
    return raw if isinstance(raw, torch.dtype) else None


def resolve_dtype(model_config: ModelConfig, hf_config: PretrainedConfig, platform: Platform) -> torch.dtype:
    """``auto`` takes the platform's default dtype, except that on a platform defaulting to half
    precision a float16/bfloat16 checkpoint keeps its own. Explicit names must be supported."""
    caps = platform.capabilities
    if model_config.dtype == "auto":
        ckpt = _checkpoint_dtype(hf_config)
        half = (torch.float16, torch.bfloat16)
        if caps.default_dtype in half and ckpt in half and ckpt in caps.supported_dtypes:
            return ckpt
        return caps.default_dtype
    dtype = DTYPE_NAMES[model_config.dtype]
    if dtype not in caps.supported_dtypes:
        supported = ", ".join(str(d).removeprefix("torch.") for d in caps.supported_dtypes)
        raise ValueError(f"dtype {model_config.dtype} is not supported on platform {platform.name}; "
                         f"use one of: {supported}, or auto")
    return dtype
