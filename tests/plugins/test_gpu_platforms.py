"""ROCm and XPU probes with their runtimes faked (present, absent, broken), and the typed settings
the GPU platforms give kernels and the scheduler. Neither platform has run on AMD or Intel hardware
here: these tests fake what the probes read."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import infercore_rocm.platform as rocm
import infercore_xpu.platform as xpu
from infercore.plugin_api import GPU_CAPABILITIES, GpuPlatform, KernelSettings
from infercore_cuda.platform import CudaPlatform


def _kfd(tmp_path: Path, gpu_ids: list[str]) -> tuple[Path, Path]:
    device = tmp_path / "kfd"
    device.write_text("")
    nodes = tmp_path / "nodes"
    for i, gpu_id in enumerate(gpu_ids):
        (nodes / str(i)).mkdir(parents=True)
        (nodes / str(i) / "gpu_id").write_text(gpu_id + "\n")
    return device, nodes


@pytest.fixture
def hip_build(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.version, "hip", "6.4.1", raising=False)
    for var in ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        monkeypatch.delenv(var, raising=False)


def test_rocm_probe_present(hip_build, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    device, nodes = _kfd(tmp_path, ["0", "43512", "7781"])  # node 0 is the CPU
    monkeypatch.setattr(rocm, "_KFD", device)
    monkeypatch.setattr(rocm, "_KFD_NODES", nodes)
    result = rocm.RocmPlatform.probe()
    assert result.available and result.priority == rocm.PRIORITY
    assert "HIP 6.4.1" in result.reason and "2 GPU(s)" in result.reason


@pytest.mark.parametrize(("setup", "needle"), [
    ("no_hip", "built without ROCm"),
    ("no_kfd", "amdgpu kernel driver is not loaded"),
    ("hidden", "HIP_VISIBLE_DEVICES hides every GPU"),
    ("no_gpu", "topology lists no GPU"),
])
def test_rocm_probe_absent(hip_build, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, setup: str,
                           needle: str) -> None:
    device, nodes = _kfd(tmp_path, ["0"])
    monkeypatch.setattr(rocm, "_KFD", device if setup != "no_kfd" else tmp_path / "missing")
    monkeypatch.setattr(rocm, "_KFD_NODES", nodes)
    if setup == "no_hip":
        monkeypatch.setattr(torch.version, "hip", None, raising=False)
    if setup == "hidden":
        monkeypatch.setenv("HIP_VISIBLE_DEVICES", "")
    result = rocm.RocmPlatform.probe()
    assert not result.available and needle in result.reason


def test_rocm_probe_broken_driver(hip_build, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    device, nodes = _kfd(tmp_path, ["0"])
    (nodes / "1").mkdir()  # a node without its gpu_id file: the topology is half written
    monkeypatch.setattr(rocm, "_KFD", device)
    monkeypatch.setattr(rocm, "_KFD_NODES", nodes)
    result = rocm.RocmPlatform.probe()
    assert not result.available and "unreadable" in result.reason


def _fake_xpu(monkeypatch: pytest.MonkeyPatch, is_compiled) -> None:  # noqa: ANN001
    monkeypatch.setattr(xpu, "_xpu_compiled", is_compiled)


def test_xpu_probe_present(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "renderD128").write_text("")
    (tmp_path / "renderD129").write_text("")
    _fake_xpu(monkeypatch, lambda: True)
    monkeypatch.setattr(xpu, "_DRI", tmp_path)
    result = xpu.XpuPlatform.probe()
    assert result.available and "2 render node(s)" in result.reason and result.priority == xpu.PRIORITY


@pytest.mark.parametrize(("compiled", "nodes", "needle"), [
    (False, True, "built without XPU support"),
    (True, False, "no render node"),
])
def test_xpu_probe_absent(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, compiled: bool, nodes: bool,
                          needle: str) -> None:
    if nodes:
        (tmp_path / "renderD128").write_text("")
    _fake_xpu(monkeypatch, lambda: compiled)
    monkeypatch.setattr(xpu, "_DRI", tmp_path)
    result = xpu.XpuPlatform.probe()
    assert not result.available and needle in result.reason


def test_xpu_probe_broken_runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> bool:
        raise RuntimeError("libze_loader.so.1: cannot open shared object file")

    _fake_xpu(monkeypatch, broken)
    result = xpu.XpuPlatform.probe()
    assert not result.available and "torch.xpu is broken" in result.reason and "libze_loader" in result.reason


def test_gpu_platforms_share_the_core_base_and_typed_kernel_settings() -> None:
    for cls in (CudaPlatform, rocm.RocmPlatform, xpu.XpuPlatform):
        assert issubclass(cls, GpuPlatform) and isinstance(cls.capabilities.kernel, KernelSettings)
    assert CudaPlatform.capabilities.kernel.dot_precision(is_float32=False) == "tf32"
    for cls in (rocm.RocmPlatform, xpu.XpuPlatform):
        assert {cls.capabilities.kernel.dot_precision(is_float32=f) for f in (True, False)} == {"ieee"}, cls
    assert rocm.RocmPlatform.capabilities.kernel.warp_size == 64
    with pytest.raises(ValueError, match="half_dot_precision"):
        KernelSettings(half_dot_precision="tf16")


def test_async_scheduling_does_not_depend_on_graph_capture() -> None:
    caps = xpu.XpuPlatform.capabilities
    assert not caps.graph_capture and caps.async_scheduling
    assert GPU_CAPABILITIES.async_scheduling
