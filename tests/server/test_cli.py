"""Every configuration field is a `serve` flag; flags map back onto the config sections."""

from __future__ import annotations

import argparse
import subprocess
import sys

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
    number = kwargs.get("metavar", "").split("|")[0]  # INT, FLOAT, or INT|none for one that can be off
    return [flag, {"INT": "3", "FLOAT": "0.5"}.get(number, "x")]


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


@pytest.mark.parametrize(("field", "default"), [("max_num_batched_tokens_while_decoding", None),
                                               ("max_prefill_tokens_per_decode", 16)])
def test_the_prompt_bounds_while_decoding_are_flags(field: str, default: int | None) -> None:
    parse = build_parser().parse_args
    assert getattr(config_from_args(parse(["serve", "/models/x"])).scheduler, field) == default
    flag = "--" + field.replace("_", "-")
    assert getattr(config_from_args(parse(["serve", "/models/x", flag, "24"])).scheduler, field) == 24
    if default is not None:  # a bound on by default turns off with "none"
        assert getattr(config_from_args(parse(["serve", "/models/x", flag, "none"])).scheduler, field) is None
        with pytest.raises(SystemExit):
            parse(["serve", "/models/x", flag, "many"])
    load = config_from_args(parse(["serve", "/models/x", "--per-decode-bound-below-load", "0.25"]))
    assert load.scheduler.per_decode_bound_below_load == 0.25


def test_serve_builds_only_its_own_parser() -> None:
    """`infercore serve` skips the benchmarks' imports (the engine process starts sooner); help still lists all."""
    code = ("import sys; from infercore.entrypoints.cli import build_parser; p = build_parser('serve'); "
            "p.parse_args(['serve', '/models/x']); "
            "print(sorted(m for m in sys.modules if m.startswith('infercore.benchmarks')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    with pytest.raises(SystemExit):
        build_parser("serve").parse_args(["bench", "latency"])  # only serve is there
    for command in ("plugins", "serve", "bench"):
        assert command in build_parser().format_help()
