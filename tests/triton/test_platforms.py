"""The CUDA, ROCm and XPU platforms: probes that explain themselves, and op choice per platform."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from infercore.ops import get_op
from infercore.platforms import set_current_platform
from infercore_cuda.platform import CudaPlatform
from infercore_rocm.platform import RocmPlatform
from infercore_triton import rms_norm as triton_rms_norm
from infercore_xpu.platform import XpuPlatform


@pytest.mark.parametrize("platform", [CudaPlatform, RocmPlatform, XpuPlatform])
def test_probe_gives_a_reason(platform: type) -> None:
    result = platform.probe()
    assert result.reason
    if not result.available:
        assert result.priority == 0


def _fake_nvml(monkeypatch: pytest.MonkeyPatch, init_error: str | None, count: int = 1) -> None:
    class NVMLError(Exception):
        pass

    def init() -> None:
        if init_error:
            raise NVMLError(init_error)

    fake = types.SimpleNamespace(
        NVMLError=NVMLError, nvmlInit=init, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: count,
        nvmlDeviceGetHandleByIndex=lambda i: i, nvmlDeviceGetName=lambda h: b"NVIDIA H200",
        nvmlSystemGetDriverVersion=lambda: "580.1")
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_cuda_probe_reports_nvml_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_nvml(monkeypatch, "Driver Not Loaded")
    result = CudaPlatform.probe()
    assert not result.available
    assert result.reason == "NVML: Driver Not Loaded"


def test_cuda_probe_finds_gpus_through_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_nvml(monkeypatch, None, count=2)
    result = CudaPlatform.probe()
    assert result.available and result.priority > 0
    assert "2 x NVIDIA H200" in result.reason
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert not CudaPlatform.probe().available


def test_gpu_platforms_pick_triton_ops_and_backend() -> None:
    set_current_platform(CudaPlatform())
    try:
        assert get_op("rms_norm") is triton_rms_norm.rms_norm
        assert CudaPlatform().select_attention_backend(None) == "triton"  # type: ignore[arg-type]
    finally:
        set_current_platform(None)
    caps = CudaPlatform.capabilities
    assert caps.graph_capture and caps.pin_memory and caps.profile_memory
    assert caps.default_dtype == torch.bfloat16
    assert not XpuPlatform.capabilities.graph_capture
