"""Fused q/k-norm + rotary + KV write tests: Triton kernels run through the interpreter on CPU tensors.

As in ``tests/kv_fp8``, the interpreter's float32 -> e4m3 rounding (which drops a carry into the
exponent: 1.97 -> 1.0) is replaced by torch's round-to-nearest-even, the GPU's rounding, so the fp8
cache can be compared with core's reference.
"""

import pytest
import triton_interpreter
from triton.runtime import interpreter


@pytest.fixture(autouse=True)
def _interpreter_rounds_to_nearest_even(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(interpreter.InterpreterBuilder, "create_fp_to_fp",
                        triton_interpreter.fp8_rounds_to_nearest_even)
