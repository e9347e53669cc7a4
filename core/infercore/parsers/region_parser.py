"""Base class for tool-call formats built on the shared streaming engine."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

from infercore.parsers.call_stream import PartialCall, ToolCallStream
from infercore.parsers.scanner import Scanner
from infercore.parsers.tool_parser import ToolParser
from infercore.parsers.types import DeltaMessage, ExtractedToolCalls, ToolRequest


class RegionToolParser(ToolParser):
    """A tool-call format described by where its regions start and how one region reads.

    Set :attr:`start_markers` (and :attr:`anchored` when a region may only open the output, after
    whitespace) and implement :meth:`parse_region`; streaming, hold-back of partial markers,
    argument fragments and the content around regions come from
    :class:`~infercore.parsers.call_stream.ToolCallStream`.
    """

    #: Text that opens a region; the scanner given to :meth:`parse_region` starts on it.
    start_markers: tuple[str, ...] = ()
    #: Regions only open the output (the first text that is not whitespace).
    anchored: bool = False

    def __init__(self, tokenizer: Any | None = None) -> None:
        super().__init__(tokenizer)
        self._stream: ToolCallStream | None = None

    @abstractmethod
    def parse_region(self, scanner: Scanner, calls: list[PartialCall], request: ToolRequest) -> None:
        """Read one region, starting on its start marker, and return once it is closed (the
        scanner then stands just past it). Append each call to ``calls`` as soon as its name is
        known and keep its arguments node up to date while reading; let the scanner raise when
        the text runs out or cannot fit."""

    def _extract_tool_calls(self, model_output: str, request: ToolRequest) -> ExtractedToolCalls:
        return self._whole(model_output, request, truncated=False)

    def _extract_truncated_tool_calls(self, model_output: str, request: ToolRequest) -> ExtractedToolCalls:
        return self._whole(model_output, request, truncated=True)

    def _whole(self, model_output: str, request: ToolRequest, truncated: bool) -> ExtractedToolCalls:
        stream = ToolCallStream(self, request)
        stream.feed(model_output)
        stream.finish(truncated=truncated)
        calls = stream.result_calls()
        if stream.malformed or not calls:
            content = model_output if stream.malformed else "".join(stream.content)
            return ExtractedToolCalls(tools_called=False, content=content or None)
        return ExtractedToolCalls(tools_called=True, tool_calls=calls, content="".join(stream.content) or None)

    def _extract_tool_calls_streaming(self, delta_text: str, delta_token_ids: list[int],
                                      request: ToolRequest) -> DeltaMessage | None:
        if self._stream is None:
            self._stream = ToolCallStream(self, request)
        return self._stream.feed(delta_text)

    def _flush(self, request: ToolRequest) -> DeltaMessage | None:
        if self._stream is None:
            return None
        return self._stream.finish()

    def _flush_truncated(self, request: ToolRequest) -> DeltaMessage | None:
        if self._stream is None:
            return None
        return self._stream.finish(truncated=True)

    def _unsent_text(self) -> str | None:
        return self._stream.unsent_text() if self._stream is not None else None
