"""Hermes and Qwen: ``<tool_call>{"name": "f", "arguments": {...}}</tool_call>``, one call per tag."""

from __future__ import annotations

from infercore.plugin_api import PartialCall, RegionToolParser, Scanner, ToolRequest
from infercore_tool_parsers.tool.json_calls import read_call_object


class HermesToolParser(RegionToolParser):
    """Calls in ``<tool_call>`` tags; the closing tag may be missing at the very end."""

    start_markers = ("<tool_call>",)

    def parse_region(self, scanner: Scanner, calls: list[PartialCall], request: ToolRequest) -> None:
        scanner.literal("<tool_call>")
        read_call_object(scanner, calls)
        scanner.skip_ws()
        scanner.closing("</tool_call>")
