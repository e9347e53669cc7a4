"""The Platform interface: what core asks of a kind of hardware."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from infercore.platforms.capabilities import KernelSettings

if TYPE_CHECKING:
    from infercore.attention.backend import AttentionRequest
    from infercore.config import InfercoreConfig


@dataclass(frozen=True)
class ProbeResult:
    """Whether a platform can run here, why (or why not), and how strongly it wants to."""

    available: bool
    reason: str
    priority: int = 0

    def to_json(self) -> dict[str, object]:
        return {"available": self.available, "reason": self.reason, "priority": self.priority}


@dataclass(frozen=True)
class PlatformCapabilities:
    """What core may rely on. Core branches on these, never on a vendor's name."""

    graph_capture: bool = False
    pin_memory: bool = False
    supported_dtypes: tuple[torch.dtype, ...] = (torch.float32,)
    default_dtype: torch.dtype = torch.float32
    #: Whether KV cache size should come from profiling device memory (GPUs) rather than a
    #: fixed byte budget (CPU). A platform without it is never profiled: see
    #: :data:`UNPROFILED_KV_FRACTION`.
    profile_memory: bool = False
    extra: dict[str, object] = field(default_factory=dict)
    #: Whether async scheduling (step N+1 prepared while step N runs) is the default here. Independent
    #: of graph capture: it pays wherever the device runs asynchronously to the host.
    async_scheduling: bool = False
    #: Precision and launch settings for the platform's compiled kernels.
    kernel: KernelSettings = KernelSettings()


#: A platform that cannot profile memory (``capabilities.profile_memory=False``) and whose user
#: set neither ``--kv-cache-memory-bytes`` nor ``--num-gpu-blocks-override`` (nor its
#: ``update_config``) gets this fraction of ``free_memory()``, measured after the weights are
#: loaded, for its KV cache; the rest is left for activations, which were not measured.
UNPROFILED_KV_FRACTION = 0.25


class Platform(ABC):
    """A kind of hardware. Subclasses are registered through ``register_platforms``.

    ``probe()`` is a classmethod and must not initialise a device runtime: it runs for
    ``infercore plugins`` and for platform selection, on machines that may lack the hardware.
    """

    #: Short name users pass to ``INFERCORE_PLATFORM`` (``cpu``, ``cuda``…).
    name: str = ""
    #: torch device type (``"cpu"``, ``"cuda"``, ``"xpu"``).
    device_type: str = "cpu"
    #: torch.distributed backend for this hardware.
    dist_backend: str = "gloo"
    capabilities: PlatformCapabilities = PlatformCapabilities()

    @classmethod
    @abstractmethod
    def probe(cls) -> ProbeResult:
        """Is this hardware here? Cheap, and never initialises the device runtime."""

    def device(self, index: int = 0) -> torch.device:
        return torch.device(self.device_type, index) if self.device_type != "cpu" else torch.device("cpu")

    @abstractmethod
    def device_count(self) -> int:
        """Number of devices of this kind visible to the process."""

    @abstractmethod
    def total_memory(self, index: int = 0) -> int:
        """Bytes of memory on device ``index``."""

    def free_memory(self, index: int = 0) -> int:
        """Bytes of memory free on device ``index`` now (defaults to the total)."""
        return self.total_memory(index)

    @abstractmethod
    def select_attention_backend(self, request: AttentionRequest) -> str:
        """Name of the attention backend to use for this model/cache shape."""

    def update_config(self, config: InfercoreConfig) -> None:  # noqa: B027 - optional hook
        """Adjust the config for this platform (default dtype, cache sizing…). Default: nothing."""

    def set_device(self, index: int) -> None:  # noqa: B027 - optional hook
        """Make device ``index`` current for this process. Default: nothing."""

    def synchronize(self) -> None:  # noqa: B027 - optional hook
        """Wait for queued device work. Default: nothing."""

    def empty_cache(self) -> None:  # noqa: B027 - optional hook
        """Release cached device memory. Default: nothing."""

    def profile_peak_memory(self, fn: Callable[[], None]) -> int:
        """Run ``fn`` and return the peak bytes of device memory in use while it ran (weights included).

        Platforms with ``capabilities.profile_memory`` implement this; the runner sizes the KV cache
        from it.
        """
        raise NotImplementedError(f"platform {self.name!r} cannot profile memory; set --kv-cache-memory-bytes "
                                  "or capabilities.profile_memory=False")

    def kernel_builds_ahead(self) -> AbstractContextManager[None] | None:
        """A context in which the kernels a pass launches are built, side by side, instead of run (since 1.17).

        Start-up runs its passes (profiling, warm-up, the graphs' sizes) once inside it, then for real, so
        kernels compiled on first launch are built in parallel rather than one after another. Such a pass
        computes nothing; start-up never decides anything from it, and core never indexes with a kernel's
        output inside it (it marks the pass: ``kernel_builds.building_ahead()``). Default: None (no such pass)."""
        return None

    # -- device graphs: implemented by platforms with ``capabilities.graph_capture`` -------------
    def new_graph(self) -> Any:
        """An empty device graph to capture one step into (``graph.replay()`` runs it)."""
        raise NotImplementedError(f"platform {self.name!r} cannot capture device graphs")

    def graph_pool_handle(self) -> Any:
        """A memory pool that several captured graphs share."""
        raise NotImplementedError(f"platform {self.name!r} cannot capture device graphs")

    def capture_graph(self, graph: Any, pool: Any = None) -> AbstractContextManager[None]:
        """A context manager that records the device work queued inside it into ``graph``."""
        raise NotImplementedError(f"platform {self.name!r} cannot capture device graphs")
