"""FP8 mixture-of-experts tests: the Triton kernels run through Triton's interpreter on CPU tensors (see
``tests/triton_interpreter.py``), with bfloat16 dots multiplying values and float32 rounded into e4m3 and
bfloat16 to nearest even, as on the GPU (the interpreter truncates float32 into bfloat16), so that
kernels and reference quantize activations alike."""

import numpy as np
import pytest
import torch
import triton.language as tl
import triton_interpreter
from triton.runtime import interpreter

triton_interpreter.widen_bfloat16_dots()


_interpreted_cast = interpreter.InterpreterBuilder.cast_impl


def _cast_rounding_to_nearest_even(self, src, dst_type):  # noqa: ANN001
    if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
        values = torch.from_numpy(np.ascontiguousarray(src.data, dtype=np.float32))
        return interpreter.TensorHandle(values.bfloat16().view(torch.int16).numpy().view(np.uint16), tl.bfloat16)
    return _interpreted_cast(self, src, dst_type)


@pytest.fixture(autouse=True)
def _interpreter_rounds_to_nearest_even(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(interpreter.InterpreterBuilder, "create_fp_to_fp",
                        triton_interpreter.fp8_rounds_to_nearest_even)
    monkeypatch.setattr(interpreter.InterpreterBuilder, "cast_impl", _cast_rounding_to_nearest_even)


#: The tiny Qwen3-MoE's overrides per case: experts of 64 intermediate features (whole 32-blocks, 32 per
#: rank over two ranks), and of 48 (each of gate and up ends in a partial block of its own).
BLOCK = 32


@pytest.fixture(scope="session")
def fp8_moe_pair(tiny_model_factory, tmp_path_factory: pytest.TempPathFactory):
    """``fp8_moe_pair(shape)`` → (FP8 checkpoint with 32x32 blocks, dequantized float32 twin), written once."""
    from fp8_moe_checkpoints import MOE_SHAPES, write_fp8_moe_pair

    built = {}

    def make(shape: str):
        if shape not in built:
            folder = tiny_model_factory("Qwen3MoeForCausalLM", **MOE_SHAPES[shape])
            built[shape] = write_fp8_moe_pair(folder, tmp_path_factory.mktemp(f"fp8moe-{shape}"), BLOCK)
        return built[shape]

    return make
