"""DeepSeek V3: ``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>name`` then
the arguments in a fenced ```` ```json ```` block, ``<｜tool▁call▁end｜>``, and so on to
``<｜tool▁calls▁end｜>``."""

from __future__ import annotations

from infercore.plugin_api import PartialCall, RegionToolParser, Scanner, ToolRequest
from infercore_tool_parsers.tool.json_calls import read_arguments

CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
CALLS_END = "<｜tool▁calls▁end｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
CALL_END = "<｜tool▁call▁end｜>"
SEP = "<｜tool▁sep｜>"


class DeepSeekV3ToolParser(RegionToolParser):
    """A section of calls; subclasses change how one call between its markers reads."""

    start_markers = (CALLS_BEGIN,)

    def parse_region(self, scanner: Scanner, calls: list[PartialCall], request: ToolRequest) -> None:
        scanner.literal(CALLS_BEGIN)
        while True:
            scanner.skip_ws()
            if (scanner.final and scanner.at_end()) or scanner.optional(CALLS_END):
                return
            scanner.literal(CALL_BEGIN)
            self.read_call(scanner, calls)
            scanner.skip_ws()
            scanner.literal(CALL_END)

    def read_call(self, scanner: Scanner, calls: list[PartialCall]) -> None:
        """Read one call between its begin and end markers."""
        scanner.until(SEP)
        name = scanner.until("\n").strip()
        scanner.literal("```json")
        read_arguments(scanner, calls, name)
        scanner.skip_ws()
        scanner.literal("```")
