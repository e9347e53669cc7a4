"""FP8 KV cache tests: Triton kernels run through the interpreter, whose float32 -> e4m3 rounding is
replaced by torch's (round to nearest even) so that kernels and reference can be compared bit for bit.

The interpreter rounds a float32 into e4m3 by adding the first cut-off bit to the mantissa without
carrying into the exponent, so a value that rounds up to the next power of two comes out half of it
(1.97 -> 1.0). The GPU's conversion instruction rounds to nearest even, as torch does.
"""

from pathlib import Path

import pytest
import triton_interpreter
from triton.runtime import interpreter


@pytest.fixture(autouse=True)
def _interpreter_rounds_to_nearest_even(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(interpreter.InterpreterBuilder, "create_fp_to_fp",
                        triton_interpreter.fp8_rounds_to_nearest_even)


@pytest.fixture(scope="module")
def checkpoint_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny fp32 Qwen3 folder (2 layers, 2 KV heads of 16)."""
    from infercore.tiny_models import build_model_folder

    return build_model_folder(tmp_path_factory.mktemp("qwen3"), "Qwen3ForCausalLM")
