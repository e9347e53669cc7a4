"""The ROCm platform: AMD GPUs through torch's HIP build (device type "cuda")."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import torch

from infercore.plugin_api import GPU_CAPABILITIES, GpuPlatform, KernelSettings, ProbeResult

PRIORITY = 100
_KFD = Path("/dev/kfd")


class RocmPlatform(GpuPlatform):
    """AMD GPUs: torch.cuda on a HIP build of torch, Triton kernels and HIP graphs."""

    name = "rocm"
    device_type = "cuda"
    dist_backend = "nccl"
    capabilities = dataclasses.replace(GPU_CAPABILITIES, kernel=KernelSettings(fp32_dot_precision="ieee", half_dot_precision="ieee", warp_size=64))

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
        return ProbeResult(True, f"ROCm (HIP {hip}) with /dev/kfd", PRIORITY)
