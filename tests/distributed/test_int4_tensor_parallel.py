"""4-bit checkpoints split over two ranks (``mp`` executor, gloo on CPU) give the greedy tokens of one:
packed weights, zeros and scales sharded by whole groups, act-order shards keeping every group."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from distributed_cases import greedy_tokens

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "quantization"))

from int4_checkpoints import Int4Scheme, write_int4_pair  # noqa: E402

#: AWQ shards like GPTQ (test_int4_sharding.py checks every format layer by layer); one engine pair costs a minute.
SCHEMES = [Int4Scheme("gptq", 16, desc_act=True), Int4Scheme("compressed-tensors", 16)]


@pytest.mark.parametrize("scheme", SCHEMES, ids=lambda s: s.name)
def test_int4_tp2_matches_tp1(tiny_model_factory, tmp_path: Path, scheme: Int4Scheme) -> None:
    quantized, _ = write_int4_pair(tiny_model_factory("Qwen3ForCausalLM"), tmp_path, scheme)
    expected = greedy_tokens(quantized)
    assert greedy_tokens(quantized, tensor_parallel_size=2, distributed_executor_backend="mp") == expected
