"""A parser for JSON (or Python literal) text that may still be growing, and a renderer that turns
what has been read into the longest prefix of the final canonical JSON that can no longer change.

Canonical JSON is ``json.dumps(value, ensure_ascii=False)`` with its default separators, except that
numbers keep the digits the model wrote. Streaming arguments are diffs of successive renderings, so
every streamed fragment is a prefix of the non-streaming ``arguments`` string by construction.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field


class Malformed(ValueError):
    """The text can never become what the format expects."""


@dataclass
class Node:
    """A value read so far; ``complete`` once its last character has been read."""

    complete: bool


@dataclass
class Str(Node):
    value: str


@dataclass
class Num(Node):
    text: str


@dataclass
class Lit(Node):
    json_text: str


@dataclass
class Arr(Node):
    items: list[Node] = field(default_factory=list)


@dataclass
class Obj(Node):
    #: (key, value) pairs; value is None while the key or the colon is still being read.
    pairs: list[tuple[Str, Node | None]] = field(default_factory=list)


_WS = re.compile(r"[ \t\n\r]*")
_NUM_CHARS = re.compile(r"[-+0-9.eE]*")
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_PLAIN = {'"': re.compile(r'[^"\\]*'), "'": re.compile(r"[^'\\]*")}
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_JSON_LITERALS = {"true": "true", "false": "false", "null": "null"}
_PY_LITERALS = {"True": "true", "False": "false", "None": "null"}
_SURROGATES = re.compile("[\ud800-\udfff]")


_JSON_STRING_BODY = re.compile(r'[^"\\]*(?:\\.[^"\\]*)*', re.S)
_HEX = re.compile(r"[0-9a-fA-F]{0,3}")


def _without_partial_escape(body: str) -> str:
    """``body`` without a ``\\uXX`` escape cut short at its end."""
    start = body.rfind("\\u", max(0, len(body) - 5))
    if start < 0 or not _HEX.fullmatch(body, start + 2):
        return body
    run = start - len(body[:start].rstrip("\\"))  # backslashes before this one
    return body[:start] if run % 2 == 0 else body


def _decode(body: str) -> str:
    """Decode the inside of a JSON string (fast path: the C scanner of the json module)."""
    try:
        return json.decoder.scanstring(body + '"', 0, False)[0]  # type: ignore[attr-defined]
    except json.JSONDecodeError as exc:
        raise Malformed(f"bad string: {exc.msg}") from exc


def _join_surrogates(text: str) -> str:
    if not _SURROGATES.search(text):
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "surrogatepass")


class _Reader:
    """Recursive descent over ``text``; at its end, returns what it has as incomplete nodes unless
    ``final``, when running out of text is an error."""

    def __init__(self, text: str, final: bool, python: bool) -> None:
        self.text = text
        self.final = final
        self.python = python
        self.literals = _PY_LITERALS if python else _JSON_LITERALS

    def ran_out(self) -> None:
        if self.final:
            raise Malformed("the text ends inside a value")

    def ws(self, pos: int) -> int:
        return _WS.match(self.text, pos).end()  # type: ignore[union-attr]

    def value(self, pos: int) -> tuple[Node | None, int]:
        pos = self.ws(pos)
        if pos == len(self.text):
            self.ran_out()
            return None, pos
        char = self.text[pos]
        if char == '"' or (self.python and char == "'"):
            return self.string(pos)
        if char == "{":
            return self.obj(pos)
        if char == "[" or (self.python and char == "("):
            return self.array(pos)
        if char == "-" or char.isdigit():
            return self.number(pos)
        return self.literal(pos)

    def literal(self, pos: int) -> tuple[Node, int]:
        rest = self.text[pos:pos + 5]
        for word, json_text in self.literals.items():
            if rest.startswith(word):
                return Lit(True, json_text), pos + len(word)
            if word.startswith(rest) and pos + len(rest) == len(self.text):
                self.ran_out()
                return Lit(False, json_text), len(self.text)
        raise Malformed(f"unexpected text {rest!r}")

    def number(self, pos: int) -> tuple[Node, int]:
        end = _NUM_CHARS.match(self.text, pos).end()  # type: ignore[union-attr]
        token = self.text[pos:end]
        if end == len(self.text) and not self.final:
            return Num(False, token), end
        if not _NUMBER.fullmatch(token):
            raise Malformed(f"{token!r} is not a number")
        return Num(True, token), end

    def string(self, pos: int) -> tuple[Node, int]:
        if self.python:
            return self.python_string(pos)
        end = _JSON_STRING_BODY.match(self.text, pos + 1).end()  # type: ignore[union-attr]
        if end < len(self.text) and self.text[end] == '"':
            return Str(True, _decode(self.text[pos + 1:end])), end + 1
        self.ran_out()
        value = _decode(_without_partial_escape(self.text[pos + 1:end]))
        if value and "\ud800" <= value[-1] <= "\udbff":
            value = value[:-1]  # the low half of the pair has not arrived yet
        return Str(False, value), len(self.text)

    def python_string(self, pos: int) -> tuple[Node, int]:
        quote = self.text[pos]
        plain = _PLAIN[quote]
        parts: list[str] = []
        i = pos + 1
        n = len(self.text)
        while True:
            end = plain.match(self.text, i).end()  # type: ignore[union-attr]
            parts.append(self.text[i:end])
            i = end
            if i == n or (i + 1 == n and self.text[i] == "\\"):
                break
            if self.text[i] == quote:
                return Str(True, _join_surrogates("".join(parts))), i + 1
            escaped, i = self.escape(i)
            if escaped is None:
                break
            parts.append(escaped)
        self.ran_out()
        value = _join_surrogates("".join(parts))
        if value and "\ud800" <= value[-1] <= "\udbff":
            value = value[:-1]  # the low half of the pair has not arrived yet
        return Str(False, value), n

    def escape(self, i: int) -> tuple[str | None, int]:
        """Decode the Python escape at ``i`` (a backslash); None when the text ends inside it.
        Unknown escapes keep their backslash, as in Python."""
        code = self.text[i + 1]
        if code in _ESCAPES:
            return _ESCAPES[code], i + 2
        if code == "u":
            digits = self.text[i + 2:i + 6]
            if not re.fullmatch(r"[0-9a-fA-F]*", digits):
                raise Malformed(f"bad escape \\u{digits}")
            if len(digits) < 4:
                return None, i
            return chr(int(digits, 16)), i + 6
        return ("'" if code == "'" else "\\" + code), i + 2

    def array(self, pos: int) -> tuple[Node, int]:
        closer = ")" if self.text[pos] == "(" else "]"
        node = Arr(False)
        i = self.ws(pos + 1)
        while True:
            if i == len(self.text):
                self.ran_out()
                return node, i
            if self.text[i] == closer and (not node.items or self.python):
                node.complete = True
                return node, i + 1
            item, i = self.value(i)
            if item is None:
                return node, i
            node.items.append(item)
            if not item.complete:
                return node, i
            i = self.ws(i)
            if i < len(self.text) and self.text[i] == ",":
                i = self.ws(i + 1)
                if i < len(self.text) and self.text[i] == closer and not self.python:
                    raise Malformed("trailing comma")
            elif i < len(self.text) and self.text[i] == closer:
                node.complete = True
                return node, i + 1
            elif i < len(self.text):
                raise Malformed(f"expected ',' or {closer!r} in a list")

    def obj(self, pos: int) -> tuple[Node, int]:
        node = Obj(False)
        i = self.ws(pos + 1)
        if i < len(self.text) and self.text[i] == "}":
            node.complete = True
            return node, i + 1
        while True:
            if i == len(self.text):
                self.ran_out()
                return node, i
            if self.text[i] != '"' and not (self.python and self.text[i] == "'"):
                raise Malformed("object keys must be strings")
            key, i = self.string(i)
            assert isinstance(key, Str)
            node.pairs.append((key, None))
            if not key.complete:
                return node, i
            i = self.ws(i)
            if i == len(self.text):
                self.ran_out()
                return node, i
            if self.text[i] != ":":
                raise Malformed("expected ':' after an object key")
            value, i = self.value(i + 1)
            node.pairs[-1] = (key, value)
            if value is None or not value.complete:
                return node, i
            i = self.ws(i)
            if i == len(self.text):
                self.ran_out()
                return node, i
            if self.text[i] == "}":
                node.complete = True
                return node, i + 1
            if self.text[i] != ",":
                raise Malformed("expected ',' or '}' in an object")
            i = self.ws(i + 1)


def parse_partial(text: str, pos: int = 0, final: bool = False, python: bool = False) -> tuple[Node | None, int]:
    """Read one value starting at ``pos`` (after optional whitespace).

    Returns the node and the index just past it; when the text ends first, an incomplete node (or
    None if the value has not started) and ``len(text)``. With ``final`` the text is all there is,
    so running out is :class:`Malformed`. ``python`` reads Python literals (quotes of either kind,
    ``True``/``False``/``None``, tuples) and renders them as JSON.
    """
    return _Reader(text, final, python).value(pos)


def render(node: Node) -> str:
    """The canonical JSON of a complete node, or the part of it that is already certain."""
    if isinstance(node, Str):
        quoted = json.dumps(node.value, ensure_ascii=False)
        return quoted if node.complete else quoted[:-1]
    if isinstance(node, Num):
        return node.text if node.complete else ""
    if isinstance(node, Lit):
        return node.json_text if node.complete else ""
    if isinstance(node, Arr):
        body = ", ".join(render(item) for item in node.items)
        return "[" + body + ("]" if node.complete else "")
    if isinstance(node, Obj):
        body = ", ".join(_render_pair(key, value) for key, value in node.pairs)
        return "{" + body + ("}" if node.complete else "")
    raise TypeError(f"cannot render {type(node).__name__}")


def _render_pair(key: Str, value: Node | None) -> str:
    if not key.complete:
        return render(key)
    return render(key) + ": " + ("" if value is None else render(value))
