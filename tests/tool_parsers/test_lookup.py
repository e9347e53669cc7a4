"""Lookup by name through the plugin registries, and parsers that fail without raising."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from infercore.parsers import (
    DeltaMessage,
    ExtractedToolCalls,
    ToolParser,
    ToolRequest,
    get_reasoning_parser,
    get_tool_parser,
)
from infercore.plugins import get_plugin_manager, hookimpl, reset_plugin_manager
from infercore.plugins.manager import PluginManager

TOOL_PARSERS = {"hermes", "llama3_json", "pythonic", "llama4_pythonic", "mistral", "qwen3_coder", "deepseek_v3",
                "deepseek_v31", "kimi_k2", "glm45", "granite", "internlm", "jamba", "xlam", "phi4_mini_json"}
REASONING_PARSERS = {"deepseek_r1", "qwen3", "glm45", "granite"}


class BrokenParser(ToolParser):
    """Fails on everything, to prove the public methods never raise."""

    def _extract_tool_calls(self, model_output: str, request: ToolRequest) -> ExtractedToolCalls:
        raise RuntimeError("broken")

    def _extract_tool_calls_streaming(self, delta_text: str, delta_token_ids: list[int],
                                      request: ToolRequest) -> DeltaMessage | None:
        raise RuntimeError("broken")

    def _flush(self, request: ToolRequest) -> DeltaMessage | None:
        raise RuntimeError("broken")


class _ThrowawayPlugin:
    INFERCORE_PLUGIN_API = 1

    @hookimpl
    def register_tool_parsers(self, register) -> None:  # type: ignore[no-untyped-def]
        register("broken", "tool_parsers.test_lookup:BrokenParser")
        register("not_a_parser", "tool_parsers.test_lookup:TOOL_PARSERS")


@pytest.fixture
def throwaway_plugin() -> Iterator[None]:
    manager = PluginManager()
    manager.register_module(_ThrowawayPlugin(), "throwaway")
    reset_plugin_manager(manager)
    yield
    reset_plugin_manager()


def test_registries_list_every_parser() -> None:
    manager = get_plugin_manager()
    assert set(manager.registry("tool_parser").names()) >= TOOL_PARSERS
    assert set(manager.registry("reasoning_parser").names()) >= REASONING_PARSERS
    assert manager.registered_by("tool_parsers") == {"tool_parser": sorted(TOOL_PARSERS),
                                                     "reasoning_parser": sorted(REASONING_PARSERS)}


@pytest.mark.parametrize("name", sorted(TOOL_PARSERS))
def test_every_tool_parser_loads(name: str) -> None:
    assert isinstance(get_tool_parser(name, None), ToolParser)


def test_unknown_names_list_the_known_ones() -> None:
    with pytest.raises(ValueError, match="--tool-call-parser.*hermes.*xlam"):
        get_tool_parser("hermes2")
    with pytest.raises(ValueError, match="--reasoning-parser.*deepseek_r1.*qwen3"):
        get_reasoning_parser("qwen4")


def test_a_failing_parser_returns_the_text_as_content(throwaway_plugin: None) -> None:
    request = ToolRequest()
    parser = get_tool_parser("broken")
    assert parser.extract_tool_calls("some text", request) == ExtractedToolCalls(tools_called=False, content="some text")
    assert parser.extract_tool_calls_streaming("a", [1], request) == DeltaMessage(content="a")
    assert parser.extract_tool_calls_streaming("b", [2], request) == DeltaMessage(content="b")
    assert parser.flush(request) is None


def test_a_registration_that_is_not_a_parser_is_named(throwaway_plugin: None) -> None:
    with pytest.raises(TypeError, match="not_a_parser.*not a ToolParser"):
        get_tool_parser("not_a_parser")
