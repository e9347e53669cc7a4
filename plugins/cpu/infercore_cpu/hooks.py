"""infercore-cpu's hook implementations. Importing this module imports nothing heavy."""

from __future__ import annotations

from infercore.plugin_api import RegisterFn, hookimpl

INFERCORE_PLUGIN_API = (1, 14)  # available_cpus (1.14); encoder-only attention (1.6)


@hookimpl
def register_platforms(register: RegisterFn) -> None:
    register("cpu", "infercore_cpu.platform:CpuPlatform")


@hookimpl
def register_attention_backends(register: RegisterFn) -> None:
    register("torch_paged", "infercore_cpu.attention:TorchPagedAttentionBackend")


@hookimpl
def register_custom_ops(register: RegisterFn) -> None:
    register("linear", "infercore_cpu.linear:linear", platform="cpu")
    for op in ("rms_norm", "fused_add_rms_norm", "silu_and_mul", "qk_norm_rotary"):
        register(op, f"infercore_cpu.kernels:{op}", platform="cpu")
