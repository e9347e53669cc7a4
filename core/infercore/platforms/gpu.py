"""Common ground of GPU platforms reached through a torch device module (``torch.cuda``, ``torch.xpu``).

Part of the plugin API: the CUDA, ROCm and XPU plugins subclass :class:`GpuPlatform`, and so may any
out-of-tree GPU platform whose runtime torch exposes as a device module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

import torch

from infercore.platforms.capabilities import KernelSettings
from infercore.platforms.interface import Platform, PlatformCapabilities

if TYPE_CHECKING:
    from infercore.attention import AttentionRequest
    from infercore.config import InfercoreConfig


#: What GPU platforms with graphs, pinned memory and profiling offer; a platform without graphs replaces that field.
GPU_CAPABILITIES = PlatformCapabilities(
    graph_capture=True,
    pin_memory=True,
    supported_dtypes=(torch.bfloat16, torch.float16, torch.float32),
    default_dtype=torch.bfloat16,
    profile_memory=True,
    async_scheduling=True,
    kernel=KernelSettings(fp32_dot_precision="ieee", half_dot_precision="ieee"),
)


class GpuPlatform(Platform):
    """A GPU reached through a torch device module (``torch.cuda``, ``torch.xpu``), by default running
    the "triton" attention backend. Subclasses give the identity, capabilities and ``probe``."""

    #: Whether start-up builds Triton's kernels ahead (:meth:`kernel_builds_ahead`) when the environment leaves the
    #: choice open: on where it was measured to pay (NVIDIA), off elsewhere until it is (plugin API 1.18).
    builds_kernels_ahead_by_default: bool = False

    def _module(self) -> Any:
        return torch.get_device_module(self.device_type)

    def device_count(self) -> int:
        return int(self._module().device_count())

    def total_memory(self, index: int = 0) -> int:
        return int(self._module().get_device_properties(index).total_memory)

    def free_memory(self, index: int = 0) -> int:
        free, _ = self._module().mem_get_info(index)
        return int(free)

    def select_attention_backend(self, request: AttentionRequest) -> str:
        return "triton"

    def update_config(self, config: InfercoreConfig) -> None:
        # KV cache sizing is the runner's (it profiles through free_memory/profile_peak_memory).
        # (Ray places workers over the cluster's devices, not only this host's.)
        wanted = config.parallel.world_size
        have = self.device_count()
        if wanted > have and config.parallel.executor_backend != "ray":
            raise ValueError(f"tensor_parallel_size x pipeline_parallel_size is {wanted} but only {have} "
                             f"{self.name} device(s) are visible; lower the sizes or make more devices visible")

    def set_device(self, index: int) -> None:
        self._module().set_device(index)

    def synchronize(self) -> None:
        self._module().synchronize()

    def empty_cache(self) -> None:
        self._module().empty_cache()

    def profile_peak_memory(self, fn: Callable[[], None]) -> int:
        module = self._module()
        module.synchronize()
        module.reset_peak_memory_stats()
        fn()
        module.synchronize()
        return int(module.max_memory_allocated())

    def kernel_builds_ahead(self) -> AbstractContextManager[None] | None:
        """Triton's kernels built on a pool of threads (:mod:`infercore.platforms.kernel_builds`) where the
        installed Triton can: where ``INFERCORE_KERNEL_BUILDS_AHEAD=1`` asks for it, or, unset, on a platform that
        :attr:`builds_kernels_ahead_by_default` (start-up then skips it where an earlier one built the same kernels)."""
        from infercore.platforms import kernel_builds

        wanted = kernel_builds.requested()
        if wanted is None:
            wanted = self.builds_kernels_ahead_by_default
        return kernel_builds.build_ahead() if wanted and kernel_builds.supported() else None

    # -- device graphs (platforms with capabilities.graph_capture) ---------------------------------
    def new_graph(self) -> torch.cuda.CUDAGraph:
        """An empty device graph to capture one step into."""
        self._require_graphs()
        return torch.cuda.CUDAGraph()

    def graph_pool_handle(self) -> Any:
        """A memory pool that several captured graphs can share."""
        self._require_graphs()
        return torch.cuda.graph_pool_handle()

    @contextmanager
    def capture_graph(self, graph: torch.cuda.CUDAGraph, pool: Any = None) -> Iterator[None]:
        """Record the device work queued inside the block into ``graph``; replay with ``graph.replay()``."""
        self._require_graphs()
        with torch.cuda.graph(graph, pool=pool):
            yield

    def _require_graphs(self) -> None:
        if not self.capabilities.graph_capture:
            raise NotImplementedError(f"platform {self.name!r} cannot capture device graphs; run with --enforce-eager")
