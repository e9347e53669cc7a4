"""Parallel settings: which executor runs, and clear errors before any worker starts."""

from __future__ import annotations

import pytest
from transformers import PretrainedConfig

from infercore import LLM
from infercore.config import ConfigError, InfercoreConfig
from infercore.layers.tensor_parallel import check_shardable, kv_heads_per_rank


def test_default_executor_is_uni_for_one_device_and_mp_for_more() -> None:
    assert InfercoreConfig.from_kwargs().parallel.executor_backend == "uni"
    assert InfercoreConfig.from_kwargs(tensor_parallel_size=2).parallel.executor_backend == "mp"
    chosen = InfercoreConfig.from_kwargs(tensor_parallel_size=2, distributed_executor_backend="ray")
    assert chosen.parallel.executor_backend == "ray"


def test_uni_executor_refuses_several_devices() -> None:
    with pytest.raises(ConfigError, match="uni executor runs one device"):
        InfercoreConfig.from_kwargs(tensor_parallel_size=2, distributed_executor_backend="uni")


def test_data_parallel_rank_must_be_inside_the_size() -> None:
    with pytest.raises(ConfigError, match="outside data_parallel_size"):
        InfercoreConfig.from_kwargs(data_parallel_size=2, data_parallel_rank=2)


def test_kv_heads_split_or_replicate() -> None:
    assert [kv_heads_per_rank(8, n) for n in (1, 2, 4, 8, 16)] == [8, 4, 2, 1, 1]
    with pytest.raises(ValueError, match="cannot share 2 KV heads evenly"):
        kv_heads_per_rank(2, 3)


def test_shapes_that_do_not_split_are_named() -> None:
    config = PretrainedConfig(num_attention_heads=4, num_key_value_heads=2, intermediate_size=128)
    check_shardable(config, 2)
    check_shardable(config, 4)
    with pytest.raises(ValueError, match=r"number of attention heads \(4\) is not divisible by the tensor-parallel"):
        check_shardable(config, 3)


def test_engine_refuses_an_unsplittable_model_before_starting_workers(qwen3_folder, monkeypatch) -> None:
    import infercore.executor.multiproc as multiproc

    def no_workers(*args, **kwargs):
        raise AssertionError("a worker process was started")

    monkeypatch.setattr(multiproc.subprocess, "Popen", no_workers)
    with pytest.raises(ValueError, match="number of attention heads"):
        LLM(model=str(qwen3_folder), tensor_parallel_size=3, dtype="float32", num_gpu_blocks_override=16)


def test_a_worker_that_cannot_start_fails_the_engine_with_its_reason(qwen3_folder) -> None:
    # The folder has safetensors only; asking for .bin weights fails in the workers, when they load.
    with pytest.raises(RuntimeError, match=r"worker [01] failed to start: FileNotFoundError: no weights"):
        LLM(model=str(qwen3_folder), tensor_parallel_size=2, dtype="float32", num_gpu_blocks_override=16,
            load_format="pt", cpu_threads=1)
