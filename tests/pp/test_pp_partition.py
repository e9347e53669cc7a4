"""How decoder layers are split over pipeline stages, and the settings pipeline stages refuse."""

from __future__ import annotations

import pytest

from infercore.config import ConfigError, InfercoreConfig
from infercore.layers.pipeline_parallel import PARTITION_ENV, stage_layer_counts, stage_layer_ranges


@pytest.mark.parametrize(("layers", "stages", "counts"), [
    (4, 2, [2, 2]), (3, 2, [2, 1]), (5, 3, [2, 2, 1]), (7, 4, [2, 2, 2, 1]), (6, 4, [1, 2, 2, 1]), (2, 1, [2])])
def test_even_split_gives_extra_layers_before_the_last_stage(layers: int, stages: int, counts: list[int]) -> None:
    assert stage_layer_counts(layers, stages) == counts


def test_ranges_are_contiguous() -> None:
    assert stage_layer_ranges(7, 3) == [(0, 2), (2, 5), (5, 7)]


def test_partition_env_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PARTITION_ENV, "1,2")
    assert stage_layer_counts(3, 2) == [1, 2]
    for bad in ("1,1", "3,0", "x,2", "1,1,1"):
        monkeypatch.setenv(PARTITION_ENV, bad)
        with pytest.raises(ValueError, match=PARTITION_ENV):
            stage_layer_counts(3, 2)


def test_more_stages_than_layers_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot be split into 3 pipeline stages"):
        stage_layer_counts(2, 3)


def test_config_refuses_what_stages_do_not_run() -> None:
    assert InfercoreConfig.from_kwargs(pipeline_parallel_size=2).parallel.executor_backend == "mp"
    with pytest.raises(ConfigError, match="uni executor"):
        InfercoreConfig.from_kwargs(pipeline_parallel_size=2, distributed_executor_backend="uni")
    with pytest.raises(ConfigError, match="speculative"):
        InfercoreConfig.from_kwargs(pipeline_parallel_size=2, speculative_config={
            "method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3})
    with pytest.raises(ConfigError, match="LoRA"):
        InfercoreConfig.from_kwargs(pipeline_parallel_size=2, enable_lora=True)
