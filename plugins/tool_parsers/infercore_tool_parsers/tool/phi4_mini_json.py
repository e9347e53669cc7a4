"""Phi-4-mini: ``functools[{"name": "f", "arguments": {...}}, ...]``."""

from __future__ import annotations

from infercore.plugin_api import PartialCall, RegionToolParser, Scanner, ToolRequest
from infercore_tool_parsers.tool.json_calls import read_call_list


class Phi4MiniJsonToolParser(RegionToolParser):
    """A JSON list of calls after ``functools``."""

    start_markers = ("functools[",)

    def parse_region(self, scanner: Scanner, calls: list[PartialCall], request: ToolRequest) -> None:
        scanner.literal("functools")
        read_call_list(scanner, calls)
