"""Run the skinny GEMM kernels through Triton's interpreter on CPU tensors.

The variable must be set before the kernel module is imported: ``triton.jit`` reads it when it wraps
each kernel. The interpreter multiplies bfloat16 ``tl.dot`` operands as their raw bits, so its dot is
wrapped to widen them to the float32 values they stand for (the GPU multiplies the values).
"""

import os

os.environ["TRITON_INTERPRET"] = "1"

import numpy as np  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.runtime import interpreter  # noqa: E402

_interpreted_dot = interpreter.InterpreterBuilder.create_dot


def _as_float32(handle: interpreter.TensorHandle) -> interpreter.TensorHandle:
    if handle.dtype.scalar != tl.bfloat16:
        return handle
    bits = handle.data.astype(np.uint32) << np.uint32(16)
    return interpreter.TensorHandle(bits.view(np.float32), tl.float32)


def _dot_widening_bfloat16(self, a, b, d, input_precision, max_num_imprecise_acc):  # noqa: ANN001
    return _interpreted_dot(self, _as_float32(a), _as_float32(b), d, input_precision, max_num_imprecise_acc)


interpreter.InterpreterBuilder.create_dot = _dot_widening_bfloat16
