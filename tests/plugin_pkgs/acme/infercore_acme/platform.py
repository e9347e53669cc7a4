"""The acme platform: an accelerator simulated on the host CPU, which cannot profile its memory."""

from __future__ import annotations

import os

import psutil
import torch

from infercore.plugin_api import AttentionRequest, Platform, PlatformCapabilities, ProbeResult


class AcmePlatform(Platform):
    """Runs on the host; ``profile_memory=False``, so its KV cache gets the documented share of free memory."""

    name = "acme"
    device_type = "cpu"
    capabilities = PlatformCapabilities(supported_dtypes=(torch.float32, torch.bfloat16),
                                        default_dtype=torch.float32, profile_memory=False)

    @classmethod
    def probe(cls) -> ProbeResult:
        if os.environ.get("INFERCORE_ACME_UNAVAILABLE"):
            return ProbeResult(False, "disabled by INFERCORE_ACME_UNAVAILABLE")
        return ProbeResult(True, "acme accelerator (simulated on the host CPU)", priority=-200)

    def device_count(self) -> int:
        return 1

    def total_memory(self, index: int = 0) -> int:
        return psutil.virtual_memory().total

    def free_memory(self, index: int = 0) -> int:
        return psutil.virtual_memory().available

    def select_attention_backend(self, request: AttentionRequest) -> str:
        return "acme_attention"
