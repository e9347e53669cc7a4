"""The CUDA platform: NVIDIA GPUs, found through NVML without creating a CUDA context."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import torch

from infercore.plugin_api import GPU_CAPABILITIES, GpuPlatform, KernelSettings, ProbeResult

PRIORITY = 100
_PROC_DRIVER = Path("/proc/driver/nvidia/version")
#: float32 dots stay exact (tf32 would change greedy tokens); NVIDIA's Triton backend takes tf32 for the rest.
CUDA_KERNELS = KernelSettings(fp32_dot_precision="ieee", half_dot_precision="tf32")


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _probe_nvml() -> ProbeResult:
    try:
        import pynvml
    except ImportError:
        if _PROC_DRIVER.exists():
            return ProbeResult(True, "NVIDIA driver loaded (/proc/driver/nvidia); install nvidia-ml-py for "
                               "device details", PRIORITY)
        return ProbeResult(False, "no NVIDIA driver: nvidia-ml-py is not installed and /proc/driver/nvidia "
                           "is missing")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return ProbeResult(False, f"NVML: {exc}")
    try:
        count = pynvml.nvmlDeviceGetCount()
        if count == 0:
            return ProbeResult(False, "NVML: the driver is loaded but sees no GPU")
        name = _text(pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0)))
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
    except pynvml.NVMLError as exc:
        return ProbeResult(False, f"NVML: {exc}")
    finally:
        pynvml.nvmlShutdown()
    return ProbeResult(True, f"{count} x {name}, driver {driver} (NVML)", PRIORITY)


class CudaPlatform(GpuPlatform):
    """NVIDIA GPUs through torch.cuda, with Triton kernels and CUDA graphs."""

    name = "cuda"
    device_type = "cuda"
    dist_backend = "nccl"
    capabilities = dataclasses.replace(GPU_CAPABILITIES, kernel=CUDA_KERNELS)
    #: 8B shape's `infercore serve` over an empty Triton cache, H100: 19.85 s one build after another, 16.26 s
    #: built ahead (a warm cache skips it: 10.53 s, where building ahead again would cost 12.01).
    builds_kernels_ahead_by_default = True

    @classmethod
    def probe(cls) -> ProbeResult:
        if torch.version.cuda is None:
            return ProbeResult(False, f"torch {torch.__version__} was built without CUDA; install a CUDA build "
                               "of torch")
        if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
            return ProbeResult(False, "CUDA_VISIBLE_DEVICES hides every GPU")
        return _probe_nvml()
