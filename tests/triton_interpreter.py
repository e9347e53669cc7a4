"""Triton's interpreter on CPU tensors, with its two departures from the GPU put right.

Importing this module sets ``TRITON_INTERPRET``; a test folder's conftest imports it before any kernel
module, because ``triton.jit`` reads the variable when it wraps each kernel.

* The interpreter multiplies bfloat16 ``tl.dot`` operands as their raw bits: :func:`widen_bfloat16_dots`
  wraps its dot to widen them to the float32 values they stand for, as the GPU multiplies the values.
* It rounds a float32 into e4m3 by adding the first cut-off bit to the mantissa without carrying into
  the exponent (1.97 -> 1.0); the GPU's conversion rounds to nearest even, as torch does.
  :func:`fp8_rounds_to_nearest_even` is that conversion, to patch in per test.
"""

import os

os.environ["TRITON_INTERPRET"] = "1"

import numpy as np  # noqa: E402
import torch  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.runtime import interpreter  # noqa: E402

_interpreted_dot = interpreter.InterpreterBuilder.create_dot
_interpreted_fp_to_fp = interpreter.InterpreterBuilder.create_fp_to_fp


def _as_float32(handle: interpreter.TensorHandle) -> interpreter.TensorHandle:
    """bfloat16 lives as raw uint16 in the interpreter; widen it to the float32 it stands for."""
    if handle.dtype.scalar != tl.bfloat16:
        return handle
    bits = handle.data.astype(np.uint32) << np.uint32(16)
    return interpreter.TensorHandle(bits.view(np.float32), tl.float32)


def _dot_widening_bfloat16(self, a, b, d, input_precision, max_num_imprecise_acc):  # noqa: ANN001
    return _interpreted_dot(self, _as_float32(a), _as_float32(b), d, input_precision, max_num_imprecise_acc)


def widen_bfloat16_dots() -> None:
    """Make the interpreter's ``tl.dot`` multiply bfloat16 values, not their bits (for the whole run)."""
    interpreter.InterpreterBuilder.create_dot = _dot_widening_bfloat16


def fp8_rounds_to_nearest_even(self, src, dst_type, rounding_mode):  # noqa: ANN001
    """``InterpreterBuilder.create_fp_to_fp`` with float32 -> e4m3 rounded as torch (and the GPU) round."""
    if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.float8e4nv:
        values = torch.from_numpy(np.ascontiguousarray(src.data, dtype=np.float32))
        return interpreter.TensorHandle(values.to(torch.float8_e4m3fn).view(torch.uint8).numpy(), dst_type.scalar)
    return _interpreted_fp_to_fp(self, src, dst_type, rounding_mode)
