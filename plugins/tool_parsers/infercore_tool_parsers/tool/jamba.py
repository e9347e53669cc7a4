"""AI21 Jamba: ``<tool_calls>[{"name": "f", "arguments": {...}}]</tool_calls>``."""

from __future__ import annotations

from infercore.plugin_api import PartialCall, RegionToolParser, Scanner, ToolRequest
from infercore_tool_parsers.tool.json_calls import read_call_list


class JambaToolParser(RegionToolParser):
    """A JSON list of calls in ``<tool_calls>`` tags."""

    start_markers = ("<tool_calls>",)

    def parse_region(self, scanner: Scanner, calls: list[PartialCall], request: ToolRequest) -> None:
        scanner.literal("<tool_calls>")
        read_call_list(scanner, calls)
        scanner.skip_ws()
        scanner.closing("</tool_calls>")
