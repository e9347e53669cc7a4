"""GLM-4.5: ``<tool_call>name`` then ``<arg_key>k</arg_key><arg_value>v</arg_value>`` pairs and
``</tool_call>``; values are typed by the tool's JSON schema."""

from __future__ import annotations

import re

from infercore.plugin_api import (
    Malformed,
    NeedMore,
    PartialCall,
    RegionToolParser,
    Scanner,
    ToolRequest,
    partial_json,
)
from infercore_tool_parsers.tool.typed_values import typed_value

_NAME = re.compile(r"[A-Za-z_][\w.\-]*")


class Glm45ToolParser(RegionToolParser):
    """Key/value calls in ``<tool_call>`` tags."""

    start_markers = ("<tool_call>",)

    def parse_region(self, scanner: Scanner, calls: list[PartialCall], request: ToolRequest) -> None:
        scanner.literal("<tool_call>")
        name = scanner.until("\n", "<arg_key>", "</tool_call>", consume=False).strip()
        if not _NAME.fullmatch(name):
            raise Malformed(f"{name!r} is not a function name")
        arguments = partial_json.Obj(False)
        calls.append(PartialCall(name, arguments))
        while True:
            scanner.skip_ws()
            if (scanner.final and scanner.at_end()) or scanner.optional("</tool_call>"):
                arguments.complete = True
                return
            scanner.literal("<arg_key>")
            key = scanner.until("</arg_key>").strip()
            scanner.skip_ws()
            scanner.literal("<arg_value>")
            raw, done = scanner.partial_until("</arg_value>")
            value = typed_value(raw, request.parameter_schema(name, key), done)
            if value is not None:
                arguments.pairs.append((partial_json.Str(True, key), value))
            if not done:
                raise NeedMore()
