"""Fused q/k-norm + rotary + KV write tests: Triton kernels run through the interpreter on CPU tensors.

As in ``tests/kv_fp8``, the interpreter's float32 -> e4m3 rounding (which drops a carry into the
exponent: 1.97 -> 1.0) is replaced by torch's round-to-nearest-even, the GPU's rounding, so the fp8
cache can be compared with core's reference.
"""

import os

os.environ["TRITON_INTERPRET"] = "1"

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.runtime import interpreter  # noqa: E402

_interpreted_fp_to_fp = interpreter.InterpreterBuilder.create_fp_to_fp


def _fp_to_fp_nearest_even(self, src, dst_type, rounding_mode):  # noqa: ANN001
    if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.float8e4nv:
        values = torch.from_numpy(np.ascontiguousarray(src.data, dtype=np.float32))
        return interpreter.TensorHandle(values.to(torch.float8_e4m3fn).view(torch.uint8).numpy(), dst_type.scalar)
    return _interpreted_fp_to_fp(self, src, dst_type, rounding_mode)


@pytest.fixture(autouse=True)
def _interpreter_rounds_to_nearest_even(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(interpreter.InterpreterBuilder, "create_fp_to_fp", _fp_to_fp_nearest_even)
