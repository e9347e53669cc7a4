"""Refusing regexes whose shape makes backtracking engines take exponential time."""

from __future__ import annotations

from typing import Any

try:  # Python 3.11+
    import re._parser as _sre
except ImportError:  # pragma: no cover - Python 3.10
    import sre_parse as _sre  # type: ignore[no-redef]

#: The longest regex a request may send: judging one costs ~4 ms per 1,000 characters, on every
#: decode of the request's parameters.
MAX_REGEX_CHARS = 16 * 1024


def nested_unbounded_repeat(pattern: str) -> bool:
    """Whether ``pattern`` repeats, without bound, a body that is itself an unbounded repeat
    plus only optional parts (``(a+)+b``, ``(\\w+\\s?)*``), the shape on which backtracking engines
    take exponential time. The grammar backends compile regexes to automata and are immune, but a
    backtracking engine in a third-party backend would not be, and such a pattern always has an
    equivalent without the nesting. ``(\\d+,)*`` is fine: the comma separates the iterations. A
    pattern Python cannot parse is left to the backend to judge."""
    try:
        parsed = _sre.parse(pattern)
    except Exception:
        return False
    return _any_trap(list(parsed))


def _repeat(op: Any) -> bool:
    return op in (_sre.MAX_REPEAT, _sre.MIN_REPEAT) or op == getattr(_sre, "POSSESSIVE_REPEAT", None)


def _children(op: Any, arg: Any) -> list[list[tuple[Any, Any]]]:
    if _repeat(op):
        return [list(arg[2])]
    if op == _sre.SUBPATTERN:
        return [list(arg[-1])]
    if op == _sre.BRANCH:
        return [list(b) for b in arg[1]]
    if op in (_sre.ASSERT, _sre.ASSERT_NOT):
        return [list(arg[1])]
    return []


def _can_be_empty(op: Any, arg: Any) -> bool:
    if _repeat(op):
        return arg[0] == 0
    if op == _sre.SUBPATTERN:
        return all(_can_be_empty(o, a) for o, a in arg[-1])
    return False


def _unbounded(op: Any, arg: Any) -> bool:
    if _repeat(op):
        return arg[1] == _sre.MAXREPEAT
    if op == _sre.SUBPATTERN:
        return _is_trap_body(list(arg[-1]))
    return False


def _is_trap_body(body: list[tuple[Any, Any]]) -> bool:
    """An unbounded repeat with nothing but optional parts beside it."""
    has_unbounded = any(_unbounded(o, a) for o, a in body)
    return has_unbounded and all(_unbounded(o, a) or _can_be_empty(o, a) for o, a in body)


def _any_trap(items: list[tuple[Any, Any]]) -> bool:
    for op, arg in items:
        if _repeat(op) and arg[1] == _sre.MAXREPEAT and _is_trap_body(list(arg[2])):
            return True
        if any(_any_trap(child) for child in _children(op, arg)):
            return True
    return False
