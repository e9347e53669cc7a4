"""IBM Granite: ``<|tool_call|>[{"name": "f", "arguments": {...}}]`` (3.0) or the same after
``<tool_call>`` (3.1 and later)."""

from __future__ import annotations

from infercore.plugin_api import PartialCall, RegionToolParser, Scanner, ToolRequest
from infercore_tool_parsers.tool.json_calls import read_call_list


class GraniteToolParser(RegionToolParser):
    """A JSON list of calls after a Granite tool-call marker."""

    start_markers = ("<|tool_call|>", "<tool_call>")

    def parse_region(self, scanner: Scanner, calls: list[PartialCall], request: ToolRequest) -> None:
        scanner.literal(*self.start_markers)
        read_call_list(scanner, calls)
