"""DeepSeek V3.1: like V3, but each call is ``name<｜tool▁sep｜>{json}`` with no type or fence."""

from __future__ import annotations

from infercore.plugin_api import PartialCall, Scanner
from infercore_tool_parsers.tool.deepseek_v3 import SEP, DeepSeekV3ToolParser
from infercore_tool_parsers.tool.json_calls import read_arguments


class DeepSeekV31ToolParser(DeepSeekV3ToolParser):
    """The V3 section with V3.1's call layout."""

    def read_call(self, scanner: Scanner, calls: list[PartialCall]) -> None:
        name = scanner.until(SEP).strip()
        read_arguments(scanner, calls, name)
