"""Every configuration field is a `serve` flag; flags map back onto the config sections."""

from __future__ import annotations

import argparse

import pytest

from infercore.config import SECTIONS, field_section
from infercore.entrypoints.cli import build_parser
from infercore.entrypoints.serve_args import _flag_kwargs, config_from_args


def _sample_argv(name: str) -> list[str]:
    field = SECTIONS[field_section()[name]].model_fields[name]
    kwargs = _flag_kwargs(field)
    flag = "--" + name.replace("_", "-")
    if kwargs.get("action") is argparse.BooleanOptionalAction:
        return [flag]
    if "choices" in kwargs:
        return [flag, str(kwargs["choices"][-1])]
    return [flag, {int: "3", float: "0.5"}.get(kwargs.get("type"), "x")]


@pytest.mark.parametrize("name", sorted(field_section()))
def test_every_field_has_a_flag(name) -> None:
    args = build_parser().parse_args(["serve", *_sample_argv(name)])
    assert hasattr(args, name)


def test_flags_build_the_config_and_help_groups_sections(capsys) -> None:
    args = build_parser().parse_args(["serve", "/models/x", "--max-model-len", "128", "--no-enable-prefix-caching",
                                      "--api-key", "k", "--allowed-origins", "http://a", "http://b"])
    config = config_from_args(args)
    assert config.model.model == "/models/x" and config.model.max_model_len == 128
    assert config.cache.enable_prefix_caching is False
    assert config.serve.api_key == "k" and config.serve.allowed_origins == ["http://a", "http://b"]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    help_text = capsys.readouterr().out
    for title in ("model options", "KV cache options", "scheduler options", "server options"):
        assert title in help_text
    assert "--max-num-queued-requests" in help_text and "--shutdown-timeout" in help_text


@pytest.mark.parametrize("field", ["max_num_batched_tokens_while_decoding", "max_prefill_tokens_per_decode"])
def test_the_prompt_bounds_while_decoding_are_flags_and_off_by_default(field: str) -> None:
    default = config_from_args(build_parser().parse_args(["serve", "/models/x"]))
    assert getattr(default.scheduler, field) is None
    given = config_from_args(build_parser().parse_args(
        ["serve", "/models/x", "--" + field.replace("_", "-"), "16"]))
    assert getattr(given.scheduler, field) == 16
