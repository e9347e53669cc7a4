"""InternLM 2.5: ``<|action_start|><|plugin|>{"name": "f", "parameters": {...}}<|action_end|>``."""

from __future__ import annotations

from infercore.plugin_api import PartialCall, RegionToolParser, Scanner, ToolRequest
from infercore_tool_parsers.tool.json_calls import read_call_object


class InternLMToolParser(RegionToolParser):
    """One call per plugin action."""

    start_markers = ("<|action_start|>",)

    def parse_region(self, scanner: Scanner, calls: list[PartialCall], request: ToolRequest) -> None:
        scanner.literal("<|action_start|>")
        scanner.skip_ws()
        scanner.literal("<|plugin|>")
        read_call_object(scanner, calls)
        scanner.skip_ws()
        scanner.closing("<|action_end|>")
