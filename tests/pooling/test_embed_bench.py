"""The embedding benchmark end to end on tiny shapes (CPU, float32): both sides run, agree, and report."""

from __future__ import annotations

import argparse
import dataclasses
import json

import pytest

from infercore.benchmarks.embed import EMBED_WORKLOADS, EmbedShape, run


def test_embed_benchmark_runs_both_sides(capsys: pytest.CaptureFixture[str]) -> None:
    full = EMBED_WORKLOADS["w-gpu-embed"]
    tiny = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 2048}
    shapes = tuple(EmbedShape(s.label, {**s.model_config, **tiny}, s.pooling, 128) for s in full.shapes)
    workload = dataclasses.replace(full, shapes=shapes, num_inputs=12, input_len=(4, 100), dtype="float32",
                                   token_id_range=(5, 2000), engine_kwargs={"cpu_threads": 1,
                                                                            "num_gpu_blocks_override": 64})
    args = argparse.Namespace(seed=0, num_requests=None, max_num_seqs=None, max_num_batched_tokens=None, repeat=1,
                              no_progress=True, peer_batch_size=4, check=4)
    assert run(workload, args) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [line.get("engine") for line in lines] == ["infercore", "sentence-transformers", None] * 2
    for verdict in lines[2::3]:
        assert verdict["ratio_infercore_over_peer"] > 0 and verdict["min_cosine_infercore_vs_peer"] > 0.999
