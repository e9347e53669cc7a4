"""Pythonic calls (Llama 3.2 and 4): the output is ``[f(a=1, b="x"), g()]``."""

from __future__ import annotations

import re

from infercore.plugin_api import NeedMore, PartialCall, RegionToolParser, Scanner, ToolRequest, partial_json

_FUNCTION = re.compile(r"[A-Za-z_][\w.]*")
_KEYWORD = re.compile(r"[A-Za-z_]\w*")


def read_python_call(scanner: Scanner, calls: list[PartialCall]) -> None:
    """Read ``name(key=literal, ...)``; arguments become a JSON object."""
    name = scanner.match(_FUNCTION, "a function name")
    scanner.skip_ws()
    scanner.literal("(")
    arguments = partial_json.Obj(False)
    calls.append(PartialCall(name, arguments))
    while True:
        scanner.skip_ws()
        if scanner.optional(")"):
            arguments.complete = True
            return
        key = scanner.match(_KEYWORD, "a keyword argument")
        scanner.skip_ws()
        scanner.literal("=")
        value = scanner.value(python=True)
        arguments.pairs.append((partial_json.Str(True, key), value))
        if not value.complete:
            raise NeedMore()
        scanner.skip_ws()
        if scanner.literal(",", ")") == ")":
            arguments.complete = True
            return


class PythonicToolParser(RegionToolParser):
    """A Python list of calls with literal keyword arguments, opening the output."""

    start_markers: tuple[str, ...] = ("[",)
    anchored = True

    def parse_region(self, scanner: Scanner, calls: list[PartialCall], request: ToolRequest) -> None:
        scanner.literal("[")
        scanner.skip_ws()
        if scanner.optional("]"):
            return
        while True:
            scanner.skip_ws()
            read_python_call(scanner, calls)
            scanner.skip_ws()
            if scanner.literal(",", "]") == "]":
                return
