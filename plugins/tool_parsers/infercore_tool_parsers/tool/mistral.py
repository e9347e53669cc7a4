"""Mistral: ``[TOOL_CALLS] [{"name": "f", "arguments": {...}}, ...]`` before tokenizer v11, then
``[TOOL_CALLS]f{...}`` per call (v13 adds ``[CALL_ID]id`` and ``[ARGS]`` before the arguments)."""

from __future__ import annotations

import re

from infercore.plugin_api import PartialCall, RegionToolParser, Scanner, ToolRequest
from infercore_tool_parsers.tool.json_calls import read_arguments, read_call_list, read_call_object

_NAME = re.compile(r"[A-Za-z0-9_\-.]+")


class MistralToolParser(RegionToolParser):
    """Both generations of Mistral's ``[TOOL_CALLS]`` format, told apart by what follows the marker."""

    start_markers = ("[TOOL_CALLS]",)

    def parse_region(self, scanner: Scanner, calls: list[PartialCall], request: ToolRequest) -> None:
        scanner.literal("[TOOL_CALLS]")
        scanner.skip_ws()
        if scanner.at_end():
            raise scanner.need_more("the tool calls")
        first = scanner.text[scanner.pos]
        if first == "[":
            read_call_list(scanner, calls)
        elif first == "{":
            read_call_object(scanner, calls)
        else:
            name = scanner.match(_NAME, "a function name")
            call_id = scanner.match(_NAME, "a call id") if scanner.optional("[CALL_ID]") else None
            scanner.optional("[ARGS]")
            read_arguments(scanner, calls, name, call_id)
