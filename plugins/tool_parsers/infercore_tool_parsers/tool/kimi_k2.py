"""Kimi K2: ``<|tool_calls_section_begin|>`` then per call ``<|tool_call_begin|>functions.name:0``
``<|tool_call_argument_begin|>{json}<|tool_call_end|>``, closed by ``<|tool_calls_section_end|>``.
The ``functions.name:0`` text is the call's id."""

from __future__ import annotations

from infercore.plugin_api import PartialCall, RegionToolParser, Scanner, ToolRequest
from infercore_tool_parsers.tool.json_calls import read_arguments

SECTION_BEGIN = ("<|tool_calls_section_begin|>", "<|tool_call_section_begin|>")
SECTION_END = ("<|tool_calls_section_end|>", "<|tool_call_section_end|>")


def name_from_id(call_id: str) -> str:
    """``functions.get_weather:0`` → ``get_weather``."""
    name = call_id.rsplit(":", 1)[0]
    return name.split(".", 1)[1] if name.startswith("functions.") else name


class KimiK2ToolParser(RegionToolParser):
    """A section of calls, each keeping the id the model wrote."""

    start_markers = SECTION_BEGIN

    def parse_region(self, scanner: Scanner, calls: list[PartialCall], request: ToolRequest) -> None:
        scanner.literal(*SECTION_BEGIN)
        while True:
            scanner.skip_ws()
            if (scanner.final and scanner.at_end()) or scanner.choice(*SECTION_END):
                return
            scanner.literal("<|tool_call_begin|>")
            call_id = scanner.until("<|tool_call_argument_begin|>").strip()
            read_arguments(scanner, calls, name_from_id(call_id), call_id)
            scanner.skip_ws()
            scanner.literal("<|tool_call_end|>")
