"""A platform that runs on the host CPU but selects the counting attention backend."""

import os

import torch

from infercore.plugin_api import Platform, PlatformCapabilities, ProbeResult


class TestDevPlatform(Platform):
    name = "testdev"
    device_type = "cpu"
    capabilities = PlatformCapabilities(supported_dtypes=(torch.float32,), default_dtype=torch.float32)

    @classmethod
    def probe(cls):
        if os.environ.get("INFERCORE_TESTDEV_UNAVAILABLE"):
            return ProbeResult(False, "disabled by INFERCORE_TESTDEV_UNAVAILABLE")
        return ProbeResult(True, "test device backed by the host CPU", priority=-100)

    def device_count(self):
        return 1

    def total_memory(self, index=0):
        return 1 << 30

    def select_attention_backend(self, request):
        return "counting"

    def update_config(self, config):
        if config.cache.kv_cache_memory_bytes is None and config.cache.num_gpu_blocks_override is None:
            config.cache.kv_cache_memory_bytes = 64 << 20
