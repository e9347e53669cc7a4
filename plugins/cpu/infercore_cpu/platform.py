"""The CPU platform: always available, lowest priority."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import psutil
import torch

from infercore.plugin_api import Platform, PlatformCapabilities, ProbeResult, available_cpus
from infercore_cpu import thread_budget
from infercore_cpu.linear import bound_onednn_caches

if TYPE_CHECKING:
    from infercore.plugin_api import AttentionRequest, InfercoreConfig

#: KV cache bytes on CPU when the user gives no size: a quarter of RAM, at most 4 GiB.
_DEFAULT_KV_BYTES = 4 * 1024**3


class CpuPlatform(Platform):
    """Runs everything on the host with torch ops."""

    name = "cpu"
    device_type = "cpu"
    dist_backend = "gloo"
    capabilities = PlatformCapabilities(
        graph_capture=False,
        pin_memory=False,
        supported_dtypes=(torch.float32, torch.bfloat16, torch.float16),
        default_dtype=torch.float32,
        profile_memory=False,
    )

    @classmethod
    def probe(cls) -> ProbeResult:
        return ProbeResult(True, f"host CPU with {os.cpu_count()} logical cores", priority=0)

    def device_count(self) -> int:
        return 1

    def total_memory(self, index: int = 0) -> int:
        return psutil.virtual_memory().total

    def free_memory(self, index: int = 0) -> int:
        return psutil.virtual_memory().available

    def select_attention_backend(self, request: AttentionRequest) -> str:
        return "torch_paged"

    def update_config(self, config: InfercoreConfig) -> None:
        bound_onednn_caches()
        if config.parallel.cpu_threads is not None:
            torch.set_num_threads(config.parallel.cpu_threads)
        else:  # a shared machine: the CPUs we may use and nobody else is using
            thread_budget.start(min(torch.get_num_threads(), available_cpus()))
        if config.cache.kv_cache_memory_bytes is None and config.cache.num_gpu_blocks_override is None:
            config.cache.kv_cache_memory_bytes = min(_DEFAULT_KV_BYTES, self.total_memory() // 4)
