"""Whether a worker serves LoRA, and its :class:`LoRAManager` when it does."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from infercore.config import InfercoreConfig

if TYPE_CHECKING:
    from infercore.lora.manager import LoRAManager


def make_lora_manager(config: InfercoreConfig, model: nn.Module, hf_config: Any, device: torch.device,
                      dtype: torch.dtype, max_num_tokens: int, pin: bool) -> LoRAManager | None:
    """The worker's adapter slots with LoRA wrapped around ``model``'s linears; None (and the model left as
    it is: no cost at all) without ``enable_lora``."""
    if not config.lora.enable_lora:
        return None
    from infercore.lora.manager import LoRAManager

    return LoRAManager(config, model, hf_config, device, dtype, max_num_tokens, pin)
