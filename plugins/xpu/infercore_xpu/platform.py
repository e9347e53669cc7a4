"""The XPU platform: Intel GPUs through torch.xpu."""

from __future__ import annotations

from pathlib import Path

import torch

from infercore.platforms import PlatformCapabilities, ProbeResult
from infercore_triton.gpu_platform import TritonGpuPlatform

PRIORITY = 90
_DRI = Path("/dev/dri")


def _xpu_compiled() -> bool:
    module = getattr(torch, "xpu", None)
    is_compiled = getattr(module, "_is_compiled", None)
    return bool(is_compiled and is_compiled())


class XpuPlatform(TritonGpuPlatform):
    """Intel GPUs: torch.xpu with Triton kernels (no graph capture)."""

    name = "xpu"
    device_type = "xpu"
    dist_backend = "xccl"
    capabilities = PlatformCapabilities(
        graph_capture=False,
        pin_memory=True,
        supported_dtypes=(torch.bfloat16, torch.float16, torch.float32),
        default_dtype=torch.bfloat16,
        profile_memory=True,
    )

    @classmethod
    def probe(cls) -> ProbeResult:
        if not _xpu_compiled():
            return ProbeResult(False, f"torch {torch.__version__} was built without XPU support; install an XPU "
                               "build of torch")
        render_nodes = sorted(_DRI.glob("renderD*")) if _DRI.exists() else []
        if not render_nodes:
            return ProbeResult(False, "/dev/dri has no render node: no GPU driver is loaded")
        return ProbeResult(True, f"torch.xpu with {len(render_nodes)} render node(s) in /dev/dri", PRIORITY)
