"""The ROCm platform: AMD GPUs through torch's HIP build (device type "cuda")."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import torch

from infercore.plugin_api import GPU_CAPABILITIES, GpuPlatform, KernelSettings, ProbeResult

PRIORITY = 100
_KFD = Path("/dev/kfd")
#: The amdgpu driver's topology: one node per CPU and GPU agent; GPU nodes have a non-zero gpu_id.
_KFD_NODES = Path("/sys/class/kfd/kfd/topology/nodes")
#: gfx9 CDNA parts run 64-wide wavefronts; tf32 dots are refused by Triton's AMD backend outside gfx942.
ROCM_KERNELS = KernelSettings(fp32_dot_precision="ieee", half_dot_precision="ieee", warp_size=64)


def _count_gpus(nodes: Path) -> int | None:
    """GPUs in the KFD topology (None when the topology is absent); reads files only, never HIP."""
    if not nodes.is_dir():
        return None
    return sum(1 for node in nodes.iterdir() if (node / "gpu_id").read_text().strip() not in ("", "0"))


class RocmPlatform(GpuPlatform):
    """AMD GPUs: torch.cuda on a HIP build of torch, Triton kernels and HIP graphs."""

    name = "rocm"
    device_type = "cuda"
    dist_backend = "nccl"
    capabilities = dataclasses.replace(GPU_CAPABILITIES, kernel=ROCM_KERNELS)

    @classmethod
    def probe(cls) -> ProbeResult:
        hip = getattr(torch.version, "hip", None)
        if hip is None:
            return ProbeResult(False, f"torch {torch.__version__} was built without ROCm; install a ROCm build "
                               "of torch")
        if not _KFD.exists():
            return ProbeResult(False, "/dev/kfd is missing: the amdgpu kernel driver is not loaded")
        for var in ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
            if os.environ.get(var, None) in ("", "-1"):
                return ProbeResult(False, f"{var} hides every GPU")
        try:
            count = _count_gpus(_KFD_NODES)
        except (OSError, ValueError) as exc:
            return ProbeResult(False, f"the KFD topology in {_KFD_NODES} is unreadable ({exc}); the amdgpu "
                               "driver is in a bad state")
        if count == 0:
            return ProbeResult(False, "the amdgpu driver is loaded but its topology lists no GPU")
        gpus = f"{count} GPU(s)" if count is not None else "GPUs"
        return ProbeResult(True, f"ROCm (HIP {hip}) with /dev/kfd, {gpus}", PRIORITY)
