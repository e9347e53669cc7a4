"""Run the Triton kernels through Triton's interpreter on CPU tensors (see ``tests/triton_interpreter.py``)."""

import triton_interpreter

triton_interpreter.widen_bfloat16_dots()
