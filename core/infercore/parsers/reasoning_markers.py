"""Base class for reasoning formats that wrap thinking in a start and an end marker."""

from __future__ import annotations

from typing import Any

from infercore.parsers.reasoning_parser import ReasoningParser
from infercore.parsers.scanner import held_back
from infercore.parsers.types import DeltaMessage


class MarkerReasoningParser(ReasoningParser):
    """Reasoning is the text between a start marker (optional with :attr:`implicit_start`, where
    the chat template already opened it) and an end marker; content is what follows the end
    marker, without the whitespace right after it. Reasoning text is kept as written.

    When the output does not open with a start marker, it is all content, or, with
    :attr:`implicit_start`, reasoning until an end marker. ``enable_thinking=False`` makes
    everything content. Markers split across deltas are held back until they are decided.
    """

    start_markers: tuple[str, ...] = ("<think>",)
    end_markers: tuple[str, ...] = ("</think>",)
    implicit_start: bool = False
    #: Whether ``enable_thinking=False`` turns reasoning off (formats that always think ignore it).
    honors_enable_thinking: bool = True

    def __init__(self, tokenizer: Any | None = None, **kwargs: Any) -> None:
        super().__init__(tokenizer, **kwargs)
        self.thinking = not self.honors_enable_thinking or bool(kwargs.get("enable_thinking", True))
        self._text = ""
        self._pos = 0
        self._mode = "start" if self.thinking else "content"
        self._strip_ws = False
        self._marker_id_cache: dict[tuple[str, ...], set[int]] = {}

    def is_reasoning_end(self, token_ids: list[int]) -> bool:
        if not self.thinking:
            return True
        start_ids, end_ids = self._marker_ids(self.start_markers), self._marker_ids(self.end_markers)
        if end_ids:
            last_end = max((i for i, t in enumerate(token_ids) if t in end_ids), default=-1)
            last_start = max((i for i, t in enumerate(token_ids) if t in start_ids), default=-1)
            return last_end > last_start
        if self.tokenizer is None:
            return False
        text = self.tokenizer.decode(token_ids)
        last_end = max(text.rfind(m) for m in self.end_markers)
        return last_end >= 0 and last_end > max(text.rfind(m) for m in self.start_markers)

    def _marker_ids(self, markers: tuple[str, ...]) -> set[int]:
        """Ids of markers that are single tokens of the tokenizer (looked up once per parser:
        the engine asks every step, and building a large vocabulary's dict is slow)."""
        if self.tokenizer is None:
            return set()
        cached = self._marker_id_cache.get(markers)
        if cached is None:
            ids = (self.tokenizer.convert_tokens_to_ids(m) for m in markers)
            unk = getattr(self.tokenizer, "unk_token_id", None)
            cached = self._marker_id_cache[markers] = {i for i in ids if i is not None and i != unk}
        return cached

    def _extract_reasoning(self, text: str, request: object | None) -> tuple[str | None, str | None]:
        reasoning, content = self._advance(text, final=True)
        return reasoning or None, content or None

    def _extract_reasoning_streaming(self, delta_text: str, delta_token_ids: list[int]) -> DeltaMessage | None:
        return self._message(*self._advance(delta_text, final=False))

    def _flush(self) -> DeltaMessage | None:
        return self._message(*self._advance("", final=True))

    @staticmethod
    def _message(reasoning: str, content: str) -> DeltaMessage | None:
        if not reasoning and not content:
            return None
        return DeltaMessage(reasoning=reasoning or None, content=content or None)

    def _advance(self, delta: str, final: bool) -> tuple[str, str]:
        self._text += delta
        reasoning: list[str] = []
        content: list[str] = []
        while True:
            if self._mode == "start" and not self._open(final):
                break
            if self._mode == "reasoning" and not self._reason(reasoning, final):
                break
            if self._mode == "content":
                self._answer(content, final)
                break
        return "".join(reasoning), "".join(content)

    def _open(self, final: bool) -> bool:
        """Decide whether the output opens with a start marker; False while undecided."""
        rest = self._text[self._pos:]
        body = rest.lstrip()
        for marker in self.start_markers:
            if body.startswith(marker):
                self._pos += len(rest) - len(body) + len(marker)
                self._mode = "reasoning"
                return True
        if not final and any(m.startswith(body) for m in self.start_markers):
            return False
        self._mode = "reasoning" if self.implicit_start else "content"
        return True

    def _reason(self, out: list[str], final: bool) -> bool:
        found = [(i, m) for m in self.end_markers if (i := self._text.find(m, self._pos)) >= 0]
        if found:
            index, marker = min(found)
            out.append(self._text[self._pos:index])
            self._pos = index + len(marker)
            self._mode = "content"
            self._strip_ws = True
            return True
        end = len(self._text) - (0 if final else held_back(self._text, self.end_markers))
        out.append(self._text[self._pos:end])
        self._pos = max(end, self._pos)
        return False

    def _answer(self, out: list[str], final: bool) -> None:
        rest = self._text[self._pos:]
        if self._strip_ws:
            stripped = rest.lstrip()
            self._pos += len(rest) - len(stripped)
            rest = stripped
            if not rest:
                return
            self._strip_ws = False
        out.append(rest)
        self._pos = len(self._text)
