"""One device's KV cache: its spec and groups from the model's layers, its size from the memory budget,
its tensors, and the :class:`~infercore.wire.kv_layout.KVCacheLayout` the worker sends to EngineCore."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import torch
from torch import nn

from infercore.attention.backend import AttentionBackend
from infercore.attention.binding import bind_attention, layer_specs
from infercore.attention.encoder_only import ENCODER_ONLY
from infercore.config import InfercoreConfig
from infercore.kv_cache.fp8 import kv_cache_dtype
from infercore.kv_cache.groups import kv_cache_groups, kv_cache_layout, primary_blocks_for_budget
from infercore.kv_cache.spec import KVCacheSpec
from infercore.kv_cache.zeroed import zeroed
from infercore.layers.pipeline_parallel import get_pp_state
from infercore.platforms.interface import UNPROFILED_KV_FRACTION, Platform
from infercore.wire.kv_layout import KVCacheLayout

logger = logging.getLogger(__name__)


class KVCacheSetup:
    """Sizes, allocates and binds the KV cache of one model on one device.

    The layout it makes (:meth:`layout`) is the one source of the groups, their windows and pool sizes:
    the runner sizes its tables from it and EngineCore's scheduler builds its KV manager from it."""

    def __init__(self, config: InfercoreConfig, platform: Platform, device: torch.device, model: nn.Module,
                 dtype: torch.dtype, max_num_reqs: int, max_num_tokens: int, max_model_len: int) -> None:
        self.config = config
        self.platform = platform
        self.device = device
        self.block_size = config.cache.block_size
        self.max_num_reqs = max_num_reqs
        self.max_num_tokens = max_num_tokens
        self.max_blocks_per_req = math.ceil(max_model_len / self.block_size)
        specs = layer_specs(model)
        shapes = {(s.num_kv_heads, s.head_size) for s in specs}
        if len(shapes) > 1:
            raise ValueError(f"{type(model).__name__}'s attention layers differ in (KV heads, head size): "
                             f"{sorted(shapes)}; one KV cache layout for all layers is supported")
        kv_heads, head_size = shapes.pop()
        #: The cache of every layer (all layers share one shape and dtype).
        self.spec = KVCacheSpec(self.block_size, kv_heads, head_size,
                                kv_cache_dtype(config.cache.kv_cache_dtype, dtype))
        self.num_layers = len(specs)
        #: Bidirectional layers (:mod:`infercore.attention.encoder_only`) keep no KV cache: no memory is given to it.
        self.encoder_only = all(s.attn_type == ENCODER_ONLY for s in specs)
        # The groups are the whole model's (every pipeline stage has the same, so one block table serves
        # all stages); this stage allocates the caches of its own layers only.
        pp = get_pp_state()
        stage_windows = pp.gather_objects([s.sliding_window for s in specs])
        self.first_layer = sum(len(w) for w in stage_windows[:pp.rank])
        self.groups = kv_cache_groups([w for stage in stage_windows for w in stage],
                                      hybrid=not config.cache.disable_hybrid_kv_cache_manager)
        #: A second cache in the same block tables (a speculative draft's), paid from the same budget.
        self.companion: KVCacheSetup | None = None
        #: The group of each of this stage's layers, in layer order.
        self.layer_groups = [0] * self.num_layers
        for g, group in enumerate(self.groups):
            for layer in group.layers:
                if self.first_layer <= layer < self.first_layer + self.num_layers:
                    self.layer_groups[layer - self.first_layer] = g

    def layout(self, num_blocks: int) -> KVCacheLayout:
        """The layout of the cache when the primary group has ``num_blocks`` blocks."""
        return kv_cache_layout(self.groups, num_blocks, block_size=self.block_size, max_num_seqs=self.max_num_reqs,
                               max_num_batched_tokens=self.max_num_tokens,
                               page_bytes=0 if self.encoder_only else self.spec.page_size_bytes,
                               dtype=str(self.spec.dtype).removeprefix("torch."))

    def determine_num_blocks(self, profile_forward: Callable[[], None]) -> int:
        """Primary-group blocks that fit the configured budget (never more than max_num_seqs full contexts);
        ``profile_forward`` runs a peak-sized forward pass on platforms that profile memory."""
        cache = self.config.cache
        if cache.num_gpu_blocks_override is not None:
            return cache.num_gpu_blocks_override
        if cache.kv_cache_memory_bytes is not None:
            budget = cache.kv_cache_memory_bytes
        elif self.platform.capabilities.profile_memory:
            budget = self._profile_free_bytes(profile_forward)
        else:
            budget = self._unprofiled_budget()
        cap = self.max_num_reqs * self.max_blocks_per_req + 1
        num_blocks = primary_blocks_for_budget(budget, cap, self._total_bytes)
        if num_blocks < 2:
            raise ValueError(
                f"the KV cache budget of {budget} bytes holds fewer than 2 blocks of "
                f"{self.spec.page_size_bytes * self.num_layers} bytes; "
                "raise --gpu-memory-utilization or --kv-cache-memory-bytes, or use a smaller model")
        return int(num_blocks)

    def stage_bytes(self, num_blocks: int) -> int:
        """Bytes of this stage's caches when the primary group has ``num_blocks`` blocks."""
        if self.encoder_only:
            return 0
        pools = self.layout(num_blocks).pool_sizes
        return sum(self.spec.page_size_bytes * pools[g] for g in self.layer_groups)

    def _total_bytes(self, num_blocks: int) -> int:
        """This stage's caches' bytes for ``num_blocks`` primary-group blocks, its companion's included."""
        companion = self.companion.stage_bytes(num_blocks) if self.companion is not None else 0
        return self.stage_bytes(num_blocks) + companion

    def _unprofiled_budget(self) -> int:
        """The documented rule for platforms that cannot profile: a fixed fraction of free memory."""
        free = self.platform.free_memory(self.device.index or 0)
        budget = int(free * UNPROFILED_KV_FRACTION)
        logger.info("memory: platform %s does not profile; KV budget %.2f GiB (%.0f%% of %.1f GiB free); set "
                    "--kv-cache-memory-bytes to choose it", self.platform.name, budget / 2**30,
                    100 * UNPROFILED_KV_FRACTION, free / 2**30)
        return budget

    def _profile_free_bytes(self, profile_forward: Callable[[], None]) -> int:
        """Memory left for the KV cache after the weights and a peak-sized forward pass."""
        self.platform.empty_cache()
        total = self.platform.total_memory(self.device.index or 0)
        peak = self.platform.profile_peak_memory(profile_forward)
        budget = int(total * self.config.cache.gpu_memory_utilization) - peak
        logger.info("memory: total %.1f GiB, peak during profiling %.2f GiB, KV budget %.2f GiB",
                    total / 2**30, peak / 2**30, budget / 2**30)
        return max(budget, 0)

    def allocate(self, backend: type[AttentionBackend], group_blocks: list[int]) -> list[torch.Tensor]:
        """One cache per layer, of its group's ``group_blocks[g]`` blocks (empty for encoder-only layers)."""
        spec = self.spec
        if self.encoder_only:
            return [torch.empty(0, dtype=spec.dtype, device=self.device) for _ in self.layer_groups]
        shapes = [backend.get_kv_cache_shape(n, self.block_size, spec.num_kv_heads, spec.head_size)
                  for n in group_blocks]
        return [zeroed(shapes[g], spec.dtype, self.device) for g in self.layer_groups]

    def bind(self, model: nn.Module, backend: type[AttentionBackend], caches: list[torch.Tensor],
             dtype: torch.dtype) -> None:
        """Give each attention layer of ``model`` its impl, its cache and its group."""
        bind_attention(model, backend, caches, dtype, layer_groups=self.layer_groups)
