"""A cursor over the text of one tool-call region, for format grammars written as plain code.

A format reads its region top to bottom with these methods. When the text ends before the grammar
can decide, a method raises :class:`NeedMore` (the engine waits for more text); when the text can
never fit, it raises :class:`Malformed`. With ``final`` the text is complete, so running out is
malformed too.
"""

from __future__ import annotations

import re

from infercore.parsers.partial_json import Malformed, Node, parse_partial

_WS = re.compile(r"\s*")


class NeedMore(Exception):  # noqa: N818 - a signal, not an error
    """The region continues past the text received so far."""


class Scanner:
    """Reads ``text`` from ``pos``; see the module docstring for the protocol."""

    def __init__(self, text: str, pos: int = 0, final: bool = False) -> None:
        self.text = text
        self.pos = pos
        self.final = final

    def at_end(self) -> bool:
        return self.pos >= len(self.text)

    def need_more(self, what: str) -> NeedMore:
        if self.final:
            raise Malformed(f"the output ends before {what}")
        return NeedMore()

    def skip_ws(self) -> None:
        self.pos = _WS.match(self.text, self.pos).end()  # type: ignore[union-attr]

    def optional(self, literal: str) -> bool:
        """Consume ``literal`` if it comes next."""
        if self.text.startswith(literal, self.pos):
            self.pos += len(literal)
            return True
        rest = self.text[self.pos:]
        if not self.final and len(rest) < len(literal) and literal.startswith(rest):
            raise NeedMore()
        return False

    def choice(self, *literals: str) -> str | None:
        """Consume whichever of ``literals`` comes next (the first listed wins a tie)."""
        for literal in literals:
            if self.optional(literal):
                return literal
        return None

    def literal(self, *literals: str) -> str:
        """Consume one of ``literals``, which must come next."""
        found = self.choice(*literals)
        if found is None:
            raise Malformed(f"expected {' or '.join(map(repr, literals))} at {self.text[self.pos:self.pos + 20]!r}")
        return found

    def closing(self, *literals: str) -> None:
        """Consume a region's closing marker; at the very end of a final text it may be missing."""
        if not (self.final and self.at_end()):
            self.literal(*literals)

    def until(self, *stops: str, consume: bool = True) -> str:
        """The text up to the earliest of ``stops``, which is consumed unless ``consume`` is False."""
        found = [(i, stop) for stop in stops if (i := self.text.find(stop, self.pos)) >= 0]
        if not found:
            raise self.need_more(" or ".join(map(repr, stops)))
        index, stop = min(found)
        value = self.text[self.pos:index]
        self.pos = index + (len(stop) if consume else 0)
        return value

    def partial_until(self, stop: str) -> tuple[str, bool]:
        """Text up to ``stop`` and True (``stop`` consumed), or, before ``stop`` has arrived, the
        text that cannot be the start of ``stop`` and False (nothing consumed)."""
        index = self.text.find(stop, self.pos)
        if index >= 0:
            value = self.text[self.pos:index]
            self.pos = index + len(stop)
            return value, True
        if self.final:
            raise Malformed(f"the output ends before {stop!r}")
        end = len(self.text) - held_back(self.text, (stop,))
        return self.text[self.pos:max(end, self.pos)], False

    def match(self, pattern: re.Pattern[str], what: str) -> str:
        """Consume a non-empty match of ``pattern``; one that reaches the end of the text may grow."""
        found = pattern.match(self.text, self.pos)
        if found is None or not found.group():
            if self.at_end():
                raise self.need_more(what)
            raise Malformed(f"expected {what} at {self.text[self.pos:self.pos + 20]!r}")
        if found.end() == len(self.text) and not self.final:
            raise NeedMore()
        self.pos = found.end()
        return found.group()

    def value(self, python: bool = False) -> Node:
        """Read a JSON (or Python literal) value; it may be incomplete when the text ran out."""
        node, self.pos = parse_partial(self.text, self.pos, self.final, python)
        if node is None:
            raise self.need_more("a value")
        return node


def held_back(text: str, markers: tuple[str, ...]) -> int:
    """How many characters at the end of ``text`` could be the start of one of ``markers``."""
    longest = 0
    for marker in markers:
        for size in range(min(len(marker) - 1, len(text)), longest, -1):
            if text.endswith(marker[:size]):
                longest = size
                break
    return longest
