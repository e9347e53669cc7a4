"""infercore-triton's hook implementations: the "triton" attention backend and the Triton custom ops.

Importing this module imports neither triton nor torch: registrations are lazy strings.
"""

from __future__ import annotations

from infercore.plugin_api import RegisterFn, hookimpl

INFERCORE_PLUGIN_API = (1, 15)  # checked against 1.15; lora_apply (1.10); accept_drafts and encoder-only attention (1.6); captures_mixed_steps (1.5)

#: Platforms whose devices Triton compiles for; each gets the kernels below as its custom ops.
TRITON_PLATFORMS = ("cuda", "rocm", "xpu")

CUSTOM_OPS = {
    "rms_norm": "infercore_triton.rms_norm:rms_norm",
    "fused_add_rms_norm": "infercore_triton.rms_norm:fused_add_rms_norm",
    "rotary_embedding": "infercore_triton.rotary:rotary_embedding",
    "qk_norm_rotary": "infercore_triton.qk_norm_rotary:qk_norm_rotary",
    "silu_and_mul": "infercore_triton.activation:silu_and_mul",
    "gumbel_argmax": "infercore_triton.sampling:gumbel_argmax",
    "apply_penalties": "infercore_triton.sampling_penalties:apply_penalties",
    "fused_moe": "infercore_triton.fused_moe:fused_moe",
    "lora_apply": "infercore_triton.lora:lora_apply",
    "accept_drafts": "infercore_triton.rejection:accept_drafts",
}


@hookimpl
def register_attention_backends(register: RegisterFn) -> None:
    register("triton", "infercore_triton.backend:TritonAttentionBackend")


#: FP8 GEMMs, registered for CUDA only (ROCm's FP8 is the e4m3fnuz format; each checks the GPU's
#: compute capability and falls back to the reference without FP8 tensor cores).
FP8_OPS = {
    "fp8_linear": "infercore_triton.fp8_scaled_mm:fp8_linear",
    "fp8_linear_quantized": "infercore_triton.fp8_scaled_mm:fp8_linear_quantized",
    "fp8_block_linear": "infercore_triton.fp8_block_gemm:fp8_block_linear",
    "fp8_block_linear_quantized": "infercore_triton.fp8_block_gemm:fp8_block_linear_quantized",
    "rms_norm_quant": "infercore_triton.fp8_fused_quant:rms_norm_quant",
    "fused_add_rms_norm_quant": "infercore_triton.fp8_fused_quant:fused_add_rms_norm_quant",
    "silu_and_mul_quant": "infercore_triton.fp8_fused_quant:silu_and_mul_quant",
    "fused_moe_fp8_block": "infercore_triton.fused_moe_fp8:fused_moe_fp8_block",
}

#: Ops tuned for NVIDIA GPUs only: the skinny GEMM of decode batches (``F.linear`` for other shapes) and the
#: W4A16 GEMM of AWQ and GPTQ weights. Neither ``silu_and_mul_linear`` nor ``lora_linear`` is registered: a
#: SwiGLU's down projection runs the ``silu_and_mul`` kernel, then ``linear``; a LoRA linear its base op, then
#: ``lora_apply``.
NVIDIA_OPS = {"linear": "infercore_triton.skinny_gemm:linear",
              "int4_linear": "infercore_triton.int4_gemm:int4_linear"}


@hookimpl
def register_custom_ops(register: RegisterFn) -> None:
    for platform in TRITON_PLATFORMS:
        for name, target in CUSTOM_OPS.items():
            register(name, target, platform=platform)
    for name, target in {**FP8_OPS, **NVIDIA_OPS}.items():
        register(name, target, platform="cuda")
