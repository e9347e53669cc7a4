"""Qwen3-Coder: ``<tool_call><function=name><parameter=p>value</parameter>…</function></tool_call>``,
each value on its own lines; values are typed by the tool's JSON schema."""

from __future__ import annotations

from infercore.plugin_api import NeedMore, PartialCall, RegionToolParser, Scanner, ToolRequest, partial_json
from infercore_tool_parsers.tool.typed_values import typed_value


def _trim(raw: str) -> str:
    """Drop the newline after ``<parameter=p>`` and the one before ``</parameter>`` (held back
    while streaming, as it may turn out to be that one)."""
    return raw.removeprefix("\n").removesuffix("\n")


class Qwen3CoderToolParser(RegionToolParser):
    """XML-like calls; the ``<tool_call>`` wrapper may be missing."""

    start_markers = ("<tool_call>", "<function=")

    def parse_region(self, scanner: Scanner, calls: list[PartialCall], request: ToolRequest) -> None:
        wrapped = scanner.optional("<tool_call>")
        scanner.skip_ws()
        scanner.literal("<function=")
        name = scanner.until(">").strip()
        arguments = partial_json.Obj(False)
        calls.append(PartialCall(name, arguments))
        while True:
            scanner.skip_ws()
            if (scanner.final and scanner.at_end()) or scanner.optional("</function>"):
                break
            scanner.literal("<parameter=")
            key = scanner.until(">").strip()
            raw, done = scanner.partial_until("</parameter>")
            value = typed_value(_trim(raw), request.parameter_schema(name, key), done)
            if value is not None:
                arguments.pairs.append((partial_json.Str(True, key), value))
            if not done:
                raise NeedMore()
        arguments.complete = True
        if wrapped:
            scanner.skip_ws()
            scanner.closing("</tool_call>")
