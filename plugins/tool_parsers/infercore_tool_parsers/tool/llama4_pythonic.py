"""Llama 4 pythonic calls: a pythonic list, optionally inside ``<|python_start|>…<|python_end|>``."""

from __future__ import annotations

from infercore.plugin_api import PartialCall, Scanner, ToolRequest
from infercore_tool_parsers.tool.pythonic import PythonicToolParser


class Llama4PythonicToolParser(PythonicToolParser):
    """:class:`PythonicToolParser` that also accepts Llama 4's python tags around the list."""

    start_markers = ("<|python_start|>", "[")

    def parse_region(self, scanner: Scanner, calls: list[PartialCall], request: ToolRequest) -> None:
        tagged = scanner.optional("<|python_start|>")
        scanner.skip_ws()
        super().parse_region(scanner, calls, request)
        if tagged:
            scanner.skip_ws()
            scanner.closing("<|python_end|>")
