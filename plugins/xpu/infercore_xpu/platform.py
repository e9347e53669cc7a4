"""The XPU platform: Intel GPUs through torch.xpu."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from infercore.plugin_api import GPU_CAPABILITIES, GpuPlatform, KernelSettings, ProbeResult

PRIORITY = 90
_DRI = Path("/dev/dri")


def _xpu_compiled() -> bool:
    """Whether this torch build has XPU support (asks the build, never the device runtime)."""
    module = getattr(torch, "xpu", None)
    is_compiled = getattr(module, "_is_compiled", None)
    return bool(is_compiled and is_compiled())


class XpuPlatform(GpuPlatform):
    """Intel GPUs: torch.xpu with Triton kernels (no graph capture)."""

    name = "xpu"
    device_type = "xpu"
    dist_backend = "xccl"
    #: No device graphs; async scheduling still pays (the host prepares step N+1 while N runs).
    capabilities = dataclasses.replace(GPU_CAPABILITIES, graph_capture=False, async_scheduling=True,
                                       kernel=KernelSettings(fp32_dot_precision="ieee", half_dot_precision="ieee"))

    @classmethod
    def probe(cls) -> ProbeResult:
        try:
            compiled = _xpu_compiled()
        except Exception as exc:  # noqa: BLE001 - a broken torch.xpu is a reason, not a crash
            return ProbeResult(False, f"torch.xpu is broken in torch {torch.__version__}: {type(exc).__name__}: "
                               f"{exc}")
        if not compiled:
            return ProbeResult(False, f"torch {torch.__version__} was built without XPU support; install an XPU "
                               "build of torch")
        try:
            render_nodes = sorted(_DRI.glob("renderD*")) if _DRI.exists() else []
        except OSError as exc:
            return ProbeResult(False, f"{_DRI} is unreadable: {exc}")
        if not render_nodes:
            return ProbeResult(False, "/dev/dri has no render node: no GPU driver is loaded")
        return ProbeResult(True, f"torch.xpu with {len(render_nodes)} render node(s) in /dev/dri", PRIORITY)
