"""The interface of tool-call parsers: turn model output into OpenAI tool calls."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from typing import Any

from infercore.parsers.types import DeltaMessage, ExtractedToolCalls, ToolRequest

logger = logging.getLogger(__name__)


class ToolParser(ABC):
    """Finds tool calls in the text a model generates, whole or streamed.

    Make one instance per request: streaming is stateful. The server decodes output with special
    tokens kept (markers such as ``[TOOL_CALLS]`` are special tokens in many vocabularies) and
    calls :meth:`extract_tool_calls` on a finished output, or :meth:`extract_tool_calls_streaming`
    per new piece of text and :meth:`flush` once at the end of the stream.

    The public methods never raise: when a parser fails, the text it was given comes back as plain
    content and the error is logged. Subclasses implement the underscored methods.

    ``truncated`` says the output was cut by the length limit: a call cut short stays a call, with its
    arguments as far as they got (formats that can do so override the ``_truncated`` methods).
    """

    def __init__(self, tokenizer: Any | None = None) -> None:
        self.tokenizer = tokenizer
        self._failed = False

    def extract_tool_calls(self, model_output: str, request: ToolRequest, *,
                           truncated: bool = False) -> ExtractedToolCalls:
        """The tool calls and remaining content of a whole output."""
        try:
            if truncated:
                return self._extract_truncated_tool_calls(model_output, request)
            return self._extract_tool_calls(model_output, request)
        except Exception:
            logger.exception("%s failed on a model output; returning it as content", type(self).__name__)
            return ExtractedToolCalls(tools_called=False, content=model_output)

    def extract_tool_calls_streaming(self, delta_text: str, delta_token_ids: list[int],
                                     request: ToolRequest) -> DeltaMessage | None:
        """What ``delta_text`` (the new text, decoded from ``delta_token_ids``) adds to the message;
        None when it is all held back for now."""
        if self._failed:
            return DeltaMessage(content=delta_text) if delta_text else None
        try:
            return self._extract_tool_calls_streaming(delta_text, delta_token_ids, request)
        except Exception:
            return self._fail(delta_text)

    def flush(self, request: ToolRequest, *, truncated: bool = False) -> DeltaMessage | None:
        """Whatever was still held back, at the end of the stream."""
        if self._failed:
            return None
        try:
            return self._flush_truncated(request) if truncated else self._flush(request)
        except Exception:
            return self._fail("")

    def _fail(self, delta_text: str) -> DeltaMessage | None:
        logger.exception("%s failed while streaming; sending the rest as content", type(self).__name__)
        self._failed = True
        try:
            unsent = self._unsent_text()
        except Exception:
            unsent = None
        text = delta_text if unsent is None else unsent
        return DeltaMessage(content=text) if text else None

    @abstractmethod
    def _extract_tool_calls(self, model_output: str, request: ToolRequest) -> ExtractedToolCalls: ...

    @abstractmethod
    def _extract_tool_calls_streaming(self, delta_text: str, delta_token_ids: list[int],
                                      request: ToolRequest) -> DeltaMessage | None: ...

    @abstractmethod
    def _flush(self, request: ToolRequest) -> DeltaMessage | None: ...

    def _extract_truncated_tool_calls(self, model_output: str, request: ToolRequest) -> ExtractedToolCalls:
        """A whole output cut by the length limit; by default read like any other."""
        return self._extract_tool_calls(model_output, request)

    def _flush_truncated(self, request: ToolRequest) -> DeltaMessage | None:
        """The end of a stream cut by the length limit; by default like any other end."""
        return self._flush(request)

    def _unsent_text(self) -> str | None:
        """Text received (including the current delta) that was neither sent nor consumed, sent as
        content when the parser fails mid-stream; None when unknown (the delta is sent instead)."""
        return None
