"""The flags of `infercore serve`, and the configuration they describe.

Every configuration field is a flag (``max_model_len`` → ``--max-model-len``), grouped by section,
with the field's description as help. Flags not given fall back to ``INFERCORE_<FIELD>`` variables.
Kept apart from :mod:`infercore.entrypoints.serve` so that building the command line (every
`infercore` command, `bench serve` and its client processes included) imports neither the engine nor
torch.
"""

from __future__ import annotations

import argparse
import logging
import sys
import types
import typing
from typing import Any, Literal

from pydantic.fields import FieldInfo

from infercore.config import DEMO_MODEL, SECTIONS, ConfigError, InfercoreConfig, field_section

_SECTION_TITLES = {"model": "model", "cache": "KV cache", "scheduler": "scheduler", "parallel": "parallelism",
                   "load": "weight loading", "structured_outputs": "structured outputs", "serve": "server",
                   "pooling": "pooling", "multimodal": "image input"}


def _unwrap_optional(annotation: Any) -> Any:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _number_or_none(kind: type) -> typing.Callable[[str], Any]:
    """An argparse type for an optional number with a default: ``none`` (or ``off``) turns it off."""
    def parse(text: str) -> Any:
        return None if text.lower() in ("none", "off") else kind(text)
    parse.__name__ = kind.__name__  # argparse names the type in its error messages
    return parse


def _flag_kwargs(field: FieldInfo) -> dict[str, Any]:
    """argparse keyword arguments for one pydantic field; defaults stay with the config (SUPPRESS)."""
    annotation = _unwrap_optional(field.annotation)
    optional = annotation is not field.annotation
    default = field.get_default(call_default_factory=True)
    help_text = field.description or ""
    if default not in (None, [], "") and "default" not in help_text:
        help_text += f" (default: {default})"
    kwargs: dict[str, Any] = {"default": argparse.SUPPRESS, "help": help_text}
    if annotation is bool:
        kwargs["action"] = argparse.BooleanOptionalAction
    elif typing.get_origin(annotation) is Literal:
        kwargs["choices"] = list(typing.get_args(annotation))
    elif typing.get_origin(annotation) is list:
        kwargs["nargs"] = "+"
    elif annotation in (int, float):
        kwargs["type"] = annotation
        kwargs["metavar"] = annotation.__name__.upper()
        if optional and default is not None:
            kwargs["type"] = _number_or_none(annotation)
            kwargs["metavar"] += "|none"
    return kwargs


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per configuration field, in one argument group per section."""
    for section, cls in SECTIONS.items():
        group = parser.add_argument_group(f"{_SECTION_TITLES.get(section, section)} options")
        for name, field in cls.model_fields.items():
            group.add_argument("--" + name.replace("_", "-"), dest=name, **_flag_kwargs(field))


def add_serve_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``serve`` subcommand."""
    parser = subparsers.add_parser(
        "serve", help="start the OpenAI-compatible server", usage="infercore serve [MODEL] [options]",
        description="Serve MODEL (a Hugging Face repo id or local folder) over an OpenAI-compatible HTTP API. "
                    f"Without MODEL it serves the built-in '{DEMO_MODEL}' (random weights: gibberish).")
    parser.add_argument("model_tag", nargs="?", default=None, metavar="MODEL",
                        help="model to serve (same as --model)")
    add_config_flags(parser)
    parser.set_defaults(func=run_serve_command)
    return parser


def run_serve_command(args: argparse.Namespace) -> int:
    """``infercore serve``: read the flags, start the engine process, and only then import the server
    (torch, transformers, uvicorn), so that its imports overlap the engine's start-up."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from infercore.parsers.lookup import check_parser_flags

    try:
        config = config_from_args(args)
        check_parser_flags(config.serve)  # the plugin registries alone, before any process starts
    except ValueError as exc:  # ConfigError, or a parser name no plugin registers
        print(f"infercore serve: {exc}", file=sys.stderr)
        return 2
    if config.serve.api_server_count > 1:
        # The launcher only spawns and watches: it never imports the server (torch, transformers, uvicorn),
        # so the engines start at once and every API server's imports run beside their start-up.
        from infercore.engine.core_proc import DEFAULT_ENGINE_FACTORY
        from infercore.entrypoints.api_server_procs import launch

        return launch(config, DEFAULT_ENGINE_FACTORY)
    from infercore.entrypoints.early_engine import start_engine_early

    client = start_engine_early(config)
    from infercore.entrypoints.serve import run_serve_config

    return run_serve_config(config, client=client)


def config_from_args(args: argparse.Namespace) -> InfercoreConfig:
    """The configuration the given flags describe (raises ConfigError)."""
    fields = field_section()
    kwargs = {k: v for k, v in vars(args).items() if k in fields}
    if getattr(args, "model_tag", None):
        if "model" in kwargs and kwargs["model"] != args.model_tag:
            raise ConfigError("MODEL and --model disagree; give the model once")
        kwargs["model"] = args.model_tag
    return InfercoreConfig.from_kwargs(**kwargs)
