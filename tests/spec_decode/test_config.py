"""SpeculativeConfig: vLLM's keys from Python, the command line and the environment; clear refusals."""

from __future__ import annotations

import argparse
import json

import pytest

from infercore.config import ConfigError, InfercoreConfig
from infercore.entrypoints.serve_args import add_serve_parser, config_from_args
from infercore.speculative_config import SpeculativeConfig

NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 5}


def test_engine_arguments_take_a_speculative_config() -> None:
    config = InfercoreConfig.from_kwargs(speculative_config=NGRAM)
    spec = config.speculative.speculative_config
    assert isinstance(spec, SpeculativeConfig)
    assert (spec.method, spec.num_speculative_tokens, spec.lookup_range) == ("ngram", 3, (2, 5))
    assert InfercoreConfig.from_kwargs().speculative.speculative_config is None


def test_config_survives_the_json_that_crosses_processes() -> None:
    config = InfercoreConfig.from_kwargs(speculative_config=NGRAM)
    assert InfercoreConfig.model_validate_json(config.model_dump_json()) == config


def test_command_line_flag_takes_json() -> None:
    parser = argparse.ArgumentParser()
    add_serve_parser(parser.add_subparsers())
    args = parser.parse_args(["serve", "--speculative-config", json.dumps(NGRAM)])
    assert config_from_args(args).speculative.speculative_config == SpeculativeConfig(**NGRAM)
    bad = parser.parse_args(["serve", "--speculative-config", "{method: ngram}"])
    with pytest.raises(ConfigError, match="not valid JSON"):
        config_from_args(bad)


def test_environment_variable_takes_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERCORE_SPECULATIVE_CONFIG", json.dumps(NGRAM))
    assert InfercoreConfig.from_kwargs().speculative.speculative_config == SpeculativeConfig(**NGRAM)


def test_lookup_defaults() -> None:
    assert SpeculativeConfig(method="ngram", num_speculative_tokens=1).lookup_range == (1, 3)
    assert SpeculativeConfig(method="ngram", num_speculative_tokens=1, prompt_lookup_min=4).lookup_range == (4, 4)


@pytest.mark.parametrize(("given", "needle"), [
    ({"method": "medusa-ish", "num_speculative_tokens": 2}, "unknown speculative method 'medusa-ish'; choose one "
                                                            "of draft_model, eagle, eagle3, mtp, ngram"),
    ({"method": "ngram", "num_speculative_tokens": 0}, "num_speculative_tokens must be at least 1"),
    ({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 4, "prompt_lookup_max": 2},
     "prompt_lookup_min (4) is larger than prompt_lookup_max (2)"),
    ({"method": "eagle", "num_speculative_tokens": 2}, "speculative method 'eagle' proposes with a draft model"),
    ({"method": "draft_model", "num_speculative_tokens": 2, "prompt_lookup_max": 3}, "apply to method 'ngram'"),
    ({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 0}, "must be at least 1"),
    ({"method": "ngram", "num_speculative_tokens": 2, "lookahead": 3}, "lookahead"),
    ({"num_speculative_tokens": 2}, "method"),
])
def test_invalid_configs_are_refused_with_the_field_named(given: dict, needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        InfercoreConfig.from_kwargs(speculative_config=given)
    assert "speculative_config" in str(err.value) and needle in str(err.value)


def test_model_based_methods_take_their_model() -> None:
    spec = SpeculativeConfig(method="eagle3", model="org/eagle3-head", num_speculative_tokens=4,
                             draft_tensor_parallel_size=1, disable_by_batch_size=64)
    assert spec.model == "org/eagle3-head" and spec.disable_by_batch_size == 64


def test_mtp_is_refused_with_its_reason() -> None:
    with pytest.raises(ConfigError, match="multi-token-prediction layers a checkpoint carries; none of the families"):
        InfercoreConfig.from_kwargs(speculative_config={"method": "mtp", "model": "org/x", "num_speculative_tokens": 1})


def test_disable_by_batch_size_defaults_to_32_and_null_keeps_drafts_on() -> None:
    assert SpeculativeConfig(method="ngram", num_speculative_tokens=2).disable_by_batch_size == 32
    never = SpeculativeConfig(method="ngram", num_speculative_tokens=2, disable_by_batch_size=None)
    assert never.disable_by_batch_size is None
