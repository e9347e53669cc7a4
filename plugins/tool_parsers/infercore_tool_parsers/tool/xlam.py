"""Salesforce xLAM: the output is a JSON list of calls, bare or in a ```` ```json ```` fence."""

from __future__ import annotations

from infercore.plugin_api import PartialCall, RegionToolParser, Scanner, ToolRequest
from infercore_tool_parsers.tool.json_calls import read_call_list


class XLamToolParser(RegionToolParser):
    """A list of calls opening the output."""

    start_markers = ("[", "```")
    anchored = True

    def parse_region(self, scanner: Scanner, calls: list[PartialCall], request: ToolRequest) -> None:
        fenced = scanner.choice("```json", "```")
        read_call_list(scanner, calls)
        if fenced:
            scanner.skip_ws()
            scanner.closing("```")
