"""Reading the output of a constrained ``tool_choice`` as tool calls.

With ``tool_choice`` ``required`` or a named function the grammar makes the model write JSON (see
:func:`infercore.structured_output.request.tool_choice_params`): for ``required`` a list of
``{"name": ..., "arguments": {...}}`` objects, for a named function that function's arguments
object. These two parsers read that JSON on the shared streaming engine, so the calls stream as
their names and argument fragments become known, exactly as with a model's own format.
"""

from __future__ import annotations

from typing import Any

from infercore.parsers import Malformed, NeedMore, PartialCall, RegionToolParser, Scanner, ToolRequest
from infercore.parsers.partial_json import Arr, Node, Obj, Str


class NamedFunctionParser(RegionToolParser):
    """The whole output is the arguments object of the one function the request named."""

    start_markers = ("{",)
    anchored = True

    def __init__(self, tokenizer: Any | None = None, *, function: str) -> None:
        super().__init__(tokenizer)
        self.function = function

    def parse_region(self, scanner: Scanner, calls: list[PartialCall], request: ToolRequest) -> None:
        node = scanner.value()
        if not isinstance(node, Obj):
            raise Malformed("the arguments of a named tool choice must be a JSON object")
        calls.append(PartialCall(self.function, node))
        if not node.complete:
            raise NeedMore()


class RequiredCallsParser(RegionToolParser):
    """The whole output is a JSON list of ``{"name": ..., "arguments": {...}}`` objects."""

    start_markers = ("[",)
    anchored = True

    def parse_region(self, scanner: Scanner, calls: list[PartialCall], request: ToolRequest) -> None:
        node = scanner.value()
        if not isinstance(node, Arr):
            raise Malformed("the calls of a required tool choice must be a JSON list")
        for item in node.items:
            call = _call(item)
            if call is None:
                break
            calls.append(call)
        if not node.complete:
            raise NeedMore()


def _call(node: Node) -> PartialCall | None:
    """The call one list item describes, once its name is read and its arguments have begun."""
    if not isinstance(node, Obj):
        raise Malformed("each tool call must be a JSON object")
    fields = {key.value: value for key, value in node.pairs if key.complete and value is not None}
    name, arguments = fields.get("name"), fields.get("arguments")
    if name is None or not name.complete or arguments is None:
        if node.complete:
            raise Malformed("each tool call needs a name and arguments")
        return None
    if not isinstance(name, Str) or not isinstance(arguments, Obj):
        raise Malformed("a tool call's name must be a string and its arguments an object")
    return PartialCall(name.value, arguments)
