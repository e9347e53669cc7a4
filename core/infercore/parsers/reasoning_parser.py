"""The interface of reasoning parsers: split a model's thinking from its answer."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from typing import Any

from infercore.parsers.types import DeltaMessage

logger = logging.getLogger(__name__)


class ReasoningParser(ABC):
    """Separates reasoning text from content, whole or streamed.

    Make one instance per request (streaming is stateful). Keyword arguments come from the
    request's ``chat_template_kwargs`` (``enable_thinking=False`` turns thinking off where the
    format allows it); unknown ones are ignored. The public methods never raise: on failure the
    text comes back as content and the error is logged.
    """

    def __init__(self, tokenizer: Any | None = None, **kwargs: Any) -> None:
        self.tokenizer = tokenizer
        self.kwargs = kwargs
        self._failed = False

    def extract_reasoning(self, text: str, request: object | None = None) -> tuple[str | None, str | None]:
        """(reasoning, content) of a whole output; either is None when empty."""
        try:
            return self._extract_reasoning(text, request)
        except Exception:
            logger.exception("%s failed on a model output; returning it as content", type(self).__name__)
            return None, text

    def extract_reasoning_streaming(self, delta_text: str, delta_token_ids: list[int]) -> DeltaMessage | None:
        """What ``delta_text`` adds, as reasoning and/or content; None when it is held back."""
        if self._failed:
            return DeltaMessage(content=delta_text) if delta_text else None
        try:
            return self._extract_reasoning_streaming(delta_text, delta_token_ids)
        except Exception:
            logger.exception("%s failed while streaming; sending the rest as content", type(self).__name__)
            self._failed = True
            return DeltaMessage(content=delta_text) if delta_text else None

    def flush(self) -> DeltaMessage | None:
        """Whatever was still held back, at the end of the stream."""
        if self._failed:
            return None
        try:
            return self._flush()
        except Exception:
            logger.exception("%s failed at the end of a stream", type(self).__name__)
            self._failed = True
            return None

    @abstractmethod
    def is_reasoning_end(self, token_ids: list[int]) -> bool:
        """Whether reasoning is over in ``token_ids`` (prompt and output so far), so that a
        structured-output constraint may start."""

    @abstractmethod
    def _extract_reasoning(self, text: str, request: object | None) -> tuple[str | None, str | None]: ...

    @abstractmethod
    def _extract_reasoning_streaming(self, delta_text: str, delta_token_ids: list[int]) -> DeltaMessage | None: ...

    @abstractmethod
    def _flush(self) -> DeltaMessage | None: ...
