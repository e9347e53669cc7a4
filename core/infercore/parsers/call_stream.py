"""The streaming engine shared by tool-call formats.

A format says where a tool-call *region* may start (its start markers) and reads one region with a
:class:`~infercore.parsers.scanner.Scanner`, appending a :class:`PartialCall` per call as soon as the
call's name is known. The engine does the rest, identically for every format:

* text outside regions streams as content; text that could be the start of a marker is held back;
* whitespace between content and a region is dropped, so ``"Sure.\\n<tool_call>..."`` gives the
  content ``"Sure."`` and whitespace between two regions or at the end after a region vanishes; only
  whitespace between a region and content that follows it is kept, when content also came before
  the region, so that ``"A. <call> B."`` gives ``"A. B."``;
* on each new piece of text the open region is read again from its start, and what changed is sent
  as deltas: a call's header (index, id, type, name) once, then argument fragments, each the part of
  the rendered arguments not yet sent (see :mod:`infercore.parsers.partial_json`);
* a region that turns out malformed before any of its calls was sent becomes content again, with
  the rest of the output; one that breaks after a call was sent keeps the calls sent and streams
  the rest as content. Whole-output parsing is strict instead: any malformed region makes the whole
  output content;
* an output cut by the length limit inside a region keeps the region's calls as calls, the last
  with its arguments as far as they got (never sent again as content); a region cut before it
  named a call is content.

Whole-output parsing runs the same engine on the whole text at once, so streaming and whole-output
results agree however the text is split.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from infercore.parsers.partial_json import Malformed, Node, render
from infercore.parsers.scanner import NeedMore, Scanner, held_back
from infercore.parsers.types import DeltaMessage, DeltaToolCall, FunctionCall, ToolCall

if TYPE_CHECKING:
    from infercore.parsers.region_parser import RegionToolParser
    from infercore.parsers.types import ToolRequest


def make_tool_call_id() -> str:
    """A fresh id in OpenAI's style."""
    return "call_" + uuid.uuid4().hex[:24]


@dataclass
class PartialCall:
    """A call as far as the region has been read: its name, and its arguments node (None until
    they start; a complete empty object when the call has none). ``id`` overrides the generated id
    for formats that carry their own."""

    name: str
    arguments: Node | None = None
    id: str | None = None


@dataclass
class _SentCall:
    id: str
    name: str
    arguments: str = ""


@dataclass
class _Step:
    content: list[str] = field(default_factory=list)
    tool_calls: list[DeltaToolCall] = field(default_factory=list)

    def message(self) -> DeltaMessage | None:
        text = "".join(self.content)
        if not text and not self.tool_calls:
            return None
        return DeltaMessage(content=text or None, tool_calls=self.tool_calls)


class ToolCallStream:
    """One request's parse state; feed it text as it arrives, then call :meth:`finish`."""

    def __init__(self, parser: RegionToolParser, request: ToolRequest) -> None:
        self.parser = parser
        self.request = request
        self.text = ""
        self.pos = 0  # everything before pos has been sent or dropped
        self.mode = "content"  # or "region", or "verbatim" after a malformed region
        self.region_at = 0
        self.region_first_call = 0
        self.held_from = 0
        self.after_region = False
        self.content_seen = False
        self.malformed = False
        self.calls: list[_SentCall] = []
        self.content: list[str] = []

    def feed(self, text: str) -> DeltaMessage | None:
        self.text += text
        return self._advance(final=False)

    def finish(self, truncated: bool = False) -> DeltaMessage | None:
        if truncated and self.mode == "region":
            return self._cut()
        return self._advance(final=True)

    def unsent_text(self) -> str:
        return self.text[self.pos:]

    def result_calls(self) -> list[ToolCall]:
        return [ToolCall(id=c.id, function=FunctionCall(name=c.name, arguments=c.arguments)) for c in self.calls]

    # -- steps ---------------------------------------------------------------------------------
    def _advance(self, final: bool) -> DeltaMessage | None:
        step = _Step()
        while True:
            if self.mode == "verbatim":
                self._send(step, self.text[self.pos:])
                self.pos = len(self.text)
                break
            progressed = self._content(step, final) if self.mode == "content" else self._region(step, final)
            if not progressed:
                break
        self.content.extend(step.content)
        return step.message()

    def _send(self, step: _Step, text: str) -> None:
        if text:
            step.content.append(text)

    def _content(self, step: _Step, final: bool) -> bool:
        at_start = not self.content_seen and not self.calls and not self.after_region
        start, safe_end = self._find_start(at_start, final)
        segment = self.text[self.pos:start if start is not None else safe_end]
        trim_start = self.after_region and not self.content_seen
        if start is None and final:
            if segment.strip() or not self.after_region:
                self._send(step, segment.lstrip() if trim_start else segment)
            self.pos = len(self.text)
            return False
        kept = segment.rstrip()
        visible = kept.lstrip() if trim_start else kept
        if visible:
            self._send(step, visible)
            self.after_region = False
            self.content_seen = True
        self.pos += len(kept)
        if start is None:
            return False
        self.held_from = self.pos
        self.mode = "region"
        self.region_at = self.pos = start
        self.region_first_call = len(self.calls)
        return True

    def _find_start(self, at_start: bool, final: bool) -> tuple[int | None, int]:
        """Where the next region starts (or None) and how far content is safe to send."""
        markers = self.parser.start_markers
        if self.parser.anchored:
            if not at_start:
                return None, len(self.text)
            first = len(self.text[self.pos:]) - len(self.text[self.pos:].lstrip()) + self.pos
            rest = self.text[first:]
            if any(rest.startswith(m) for m in markers):
                return first, first
            if not final and any(m.startswith(rest) for m in markers):
                return None, self.pos
            return None, len(self.text)
        found = [i for m in markers if (i := self.text.find(m, self.pos)) >= 0]
        if found:
            return min(found), min(found)
        return None, len(self.text) - (0 if final else held_back(self.text, markers))

    def _region(self, step: _Step, final: bool) -> bool:
        scanner = Scanner(self.text, self.region_at, final)
        calls: list[PartialCall] = []
        try:
            try:
                self.parser.parse_region(scanner, calls, self.request)
                closed = True
            except NeedMore:
                closed = False
            self._send_calls(step, calls, closed)
        except Malformed:
            self._broken()
            return True
        if not closed:
            return False
        self.mode = "content"
        self.pos = scanner.pos
        self.after_region = True
        return True

    def _cut(self) -> DeltaMessage | None:
        """The output ended inside the open region: what it sent are calls; the rest is dropped."""
        if len(self.calls) > self.region_first_call:
            self.pos = len(self.text)
            return None
        self.mode = "verbatim"
        self.pos = self.held_from
        return self._advance(final=True)

    def _broken(self) -> None:
        self.malformed = True
        self.mode = "verbatim"
        self.pos = self.held_from if len(self.calls) == self.region_first_call else self.region_at

    def _send_calls(self, step: _Step, calls: list[PartialCall], closed: bool) -> None:
        for offset, call in enumerate(calls):
            index = self.region_first_call + offset
            finished = closed or offset < len(calls) - 1
            arguments = "" if call.arguments is None else render(call.arguments)
            if finished and (call.arguments is None or not call.arguments.complete):
                raise Malformed(f"the arguments of {call.name!r} are incomplete")
            delta = DeltaToolCall(index=index)
            if index == len(self.calls):
                self.calls.append(_SentCall(call.id or make_tool_call_id(), call.name))
                delta.id, delta.type = self.calls[index].id, "function"
                delta.function.name = call.name
            sent = self.calls[index]
            if not arguments.startswith(sent.arguments):
                raise AssertionError(f"arguments of {call.name!r} changed after they were sent")
            fragment = arguments[len(sent.arguments):]
            if fragment or delta.id is not None:
                delta.function.arguments = fragment
                sent.arguments = arguments
                step.tool_calls.append(delta)
