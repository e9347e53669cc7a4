"""Llama 3.x JSON calls: the output is ``{"name": "f", "parameters": {...}}`` (optionally after
``<|python_tag|>``), several separated by ``;``."""

from __future__ import annotations

from infercore.plugin_api import PartialCall, RegionToolParser, Scanner, ToolRequest
from infercore_tool_parsers.tool.json_calls import read_call_object


class Llama3JsonToolParser(RegionToolParser):
    """Calls only where the output opens with ``{`` or ``<|python_tag|>``."""

    start_markers = ("<|python_tag|>", "{")
    anchored = True

    def parse_region(self, scanner: Scanner, calls: list[PartialCall], request: ToolRequest) -> None:
        scanner.optional("<|python_tag|>")
        while True:
            read_call_object(scanner, calls)
            scanner.skip_ws()
            if not scanner.optional(";"):
                return
