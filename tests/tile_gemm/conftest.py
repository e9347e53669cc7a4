"""Run the tile GEMM kernel through Triton's interpreter on CPU tensors (see
``tests/triton_interpreter.py``: bfloat16 dots multiply values, as on the GPU)."""

import triton_interpreter

triton_interpreter.widen_bfloat16_dots()
