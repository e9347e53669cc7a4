"""Reading calls written as JSON objects: ``{"name": ..., "arguments": {...}}``, alone or in a list."""

from __future__ import annotations

from infercore.plugin_api import Malformed, NeedMore, PartialCall, Scanner, partial_json

ARGUMENT_KEYS = ("arguments", "parameters")


def call_from_object(node: partial_json.Node, argument_keys: tuple[str, ...] = ARGUMENT_KEYS) -> PartialCall | None:
    """The call an object describes, once its name is read and its arguments have begun (or the
    object has ended without any); None before that."""
    if not isinstance(node, partial_json.Obj):
        raise Malformed("a tool call must be a JSON object")
    name: str | None = None
    arguments: partial_json.Node | None = None
    has_arguments = False
    for key, value in node.pairs:
        if not key.complete or value is None:
            continue
        if key.value == "name" and value.complete:
            if not isinstance(value, partial_json.Str):
                raise Malformed("a tool call's name must be a string")
            name = value.value
        elif key.value in argument_keys:
            if not isinstance(value, partial_json.Obj):
                raise Malformed("a tool call's arguments must be a JSON object")
            has_arguments, arguments = True, value
    if node.complete:
        if name is None:
            raise Malformed("a tool call needs a name")
        return PartialCall(name, arguments if has_arguments else partial_json.Obj(True))
    if name is None or not has_arguments:
        return None
    return PartialCall(name, arguments)


def read_call_object(scanner: Scanner, calls: list[PartialCall],
                     argument_keys: tuple[str, ...] = ARGUMENT_KEYS) -> None:
    """Read one call object."""
    node = scanner.value()
    call = call_from_object(node, argument_keys)
    if call is not None:
        calls.append(call)
    if not node.complete:
        raise NeedMore()


def read_call_list(scanner: Scanner, calls: list[PartialCall],
                   argument_keys: tuple[str, ...] = ARGUMENT_KEYS) -> None:
    """Read a JSON list of call objects."""
    node = scanner.value()
    if not isinstance(node, partial_json.Arr):
        raise Malformed("tool calls must be a JSON list")
    for item in node.items:
        call = call_from_object(item, argument_keys)
        if call is None:
            break
        calls.append(call)
    if not node.complete:
        raise NeedMore()


def read_arguments(scanner: Scanner, calls: list[PartialCall], name: str, call_id: str | None = None) -> None:
    """Read the arguments object of a call whose name came before it."""
    node = scanner.value()
    if not isinstance(node, partial_json.Obj):
        raise Malformed("a tool call's arguments must be a JSON object")
    calls.append(PartialCall(name, node, call_id))
    if not node.complete:
        raise NeedMore()
