"""Find tool-call and reasoning parsers by name in the plugin registries."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from infercore.parsers.reasoning_parser import ReasoningParser
from infercore.parsers.tool_parser import ToolParser
from infercore.plugins import get_plugin_manager

if TYPE_CHECKING:
    from infercore.config import ServeConfig


def _load(kind: str, name: str, option: str, base: type) -> type:
    registry = get_plugin_manager().registry(kind)
    if name not in registry:
        known = ", ".join(registry.names()) or "none (install infercore-tool-parsers)"
        raise ValueError(f"unknown {kind.replace('_', ' ')} {name!r}; pass one of these to {option}: {known}")
    cls = registry.load(name)
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise TypeError(f"{kind.replace('_', ' ')} {name!r} ({registry.get(name).target}) is not a "
                        f"{base.__name__} subclass; fix or disable the plugin that registers it")
    return cls


def get_tool_parser(name: str, tokenizer: Any | None = None) -> ToolParser:
    """A new tool parser (one per request) registered as ``name``."""
    return _load("tool_parser", name, "--tool-call-parser", ToolParser)(tokenizer)


def get_reasoning_parser(name: str, tokenizer: Any | None = None, **kwargs: Any) -> ReasoningParser:
    """A new reasoning parser (one per request) registered as ``name``; ``kwargs`` are the
    request's chat template kwargs, such as ``enable_thinking``."""
    return _load("reasoning_parser", name, "--reasoning-parser", ReasoningParser)(tokenizer, **kwargs)


def check_parser_flags(serve: ServeConfig) -> None:
    """Raise ValueError, naming the known parsers, when the server's parser flags can't be served."""
    if serve.enable_auto_tool_choice and not serve.tool_call_parser:
        raise ValueError("--enable-auto-tool-choice needs --tool-call-parser NAME to read the model's tool calls")
    if serve.tool_call_parser:
        get_tool_parser(serve.tool_call_parser)
    if serve.reasoning_parser:
        get_reasoning_parser(serve.reasoning_parser)
