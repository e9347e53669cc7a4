"""KernelSettings: the typed launch and precision settings a platform gives its kernels."""

from __future__ import annotations

from dataclasses import dataclass

#: Values Triton's ``tl.dot(input_precision=...)`` accepts.
DOT_PRECISIONS = ("ieee", "tf32", "tf32x3")


@dataclass(frozen=True)
class KernelSettings:
    """How a platform's compiled kernels (Triton's, or a vendor's) should be launched.

    ``fp32_dot_precision`` / ``half_dot_precision`` are the ``input_precision`` of matrix products
    whose inputs are float32 / float16-bfloat16. Triton's AMD backend refuses ``"tf32"`` outside
    gfx942 and Intel's has no tf32, so only a platform that knows its hardware takes it; ``"ieee"``
    is valid everywhere. ``warp_size`` is the hardware's SIMD width (32 on NVIDIA and Intel, 64 on
    AMD CDNA); ``num_warps`` and ``num_stages`` the defaults of kernels that have no tuned value.
    """

    fp32_dot_precision: str = "ieee"
    half_dot_precision: str = "ieee"
    warp_size: int = 32
    num_warps: int = 4
    num_stages: int = 3

    def __post_init__(self) -> None:
        for field_name in ("fp32_dot_precision", "half_dot_precision"):
            value = getattr(self, field_name)
            if value not in DOT_PRECISIONS:
                raise ValueError(f"KernelSettings.{field_name}={value!r} is not one of {DOT_PRECISIONS}")
        if self.warp_size not in (16, 32, 64):
            raise ValueError(f"KernelSettings.warp_size={self.warp_size} must be 16, 32 or 64")
        if self.num_warps < 1 or self.num_stages < 1:
            raise ValueError("KernelSettings.num_warps and num_stages must be at least 1")

    def dot_precision(self, is_float32: bool) -> str:
        """The ``input_precision`` for products of float32 (``True``) or half-precision inputs."""
        return self.fp32_dot_precision if is_float32 else self.half_dot_precision
