"""Incremental detokenization: text for each new token, never a broken multi-byte character.

Byte-level BPE splits CJK characters and emoji over several tokens; text that ends in an incomplete
character is held back until the token that completes it arrives. Each detokenizer is primed with the
tail of the prompt, so a first output token whose text depends on what precedes it (a SentencePiece
word-start marker, for instance) decodes as it reads after the prompt.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from transformers import PreTrainedTokenizerBase

try:
    from tokenizers.decoders import DecodeStream
except ImportError:  # tokenizers < 0.21
    DecodeStream = None

_REPLACEMENT = "\ufffd"
#: Prompt tokens replayed into a new detokenizer so the first output token decodes in context.
PRIME_TOKENS = 6


def _prompt_tail(tokenizer: PreTrainedTokenizerBase, prompt_token_ids: Sequence[int]) -> list[int]:
    """The last few prompt tokens, or none if they don't decode to whole characters."""
    tail = list(prompt_token_ids[-PRIME_TOKENS:])
    if not tail or _REPLACEMENT in tokenizer.decode(tail, skip_special_tokens=False):
        return []
    return tail


class IncrementalDetokenizer(ABC):
    """Turns a stream of output token ids into text, one token at a time."""

    @abstractmethod
    def step(self, token_id: int) -> str:
        """Add one token; return the text it completes (often "", never a partial character)."""


class StreamDetokenizer(IncrementalDetokenizer):
    """Detokenizer over the Rust tokenizer's own ``DecodeStream`` (fast tokenizers).

    ``spaces_between_special_tokens`` has no effect here, as in Hugging Face fast tokenizers' ``decode``.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, prompt_token_ids: Sequence[int],
                 skip_special_tokens: bool) -> None:
        self._backend = tokenizer.backend_tokenizer
        self._stream = DecodeStream(skip_special_tokens=skip_special_tokens)
        for token_id in _prompt_tail(tokenizer, prompt_token_ids):
            self._stream.step(self._backend, token_id)

    def step(self, token_id: int) -> str:
        return self._stream.step(self._backend, token_id) or ""


class WindowDetokenizer(IncrementalDetokenizer):
    """Detokenizer for any tokenizer: decodes a small window of recent tokens with ``tokenizer.decode``.

    The window runs from ``prefix_offset`` (context already emitted) to the newest token; the text of
    ``[prefix_offset, read_offset)`` has been emitted, and what the newer tokens add to it is emitted
    once it ends in a whole character.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, prompt_token_ids: Sequence[int],
                 skip_special_tokens: bool, spaces_between_special_tokens: bool = True) -> None:
        self._tokenizer = tokenizer
        self._tokens = _prompt_tail(tokenizer, prompt_token_ids)
        self._prefix_offset = 0
        self._read_offset = len(self._tokens)
        self._decode_kwargs: dict[str, bool] = {"skip_special_tokens": skip_special_tokens}
        if not spaces_between_special_tokens:
            self._decode_kwargs["spaces_between_special_tokens"] = False

    def _decode(self, tokens: list[int]) -> str:
        return self._tokenizer.decode(tokens, **self._decode_kwargs) if tokens else ""

    def step(self, token_id: int) -> str:
        self._tokens.append(token_id)
        seen = self._decode(self._tokens[self._prefix_offset:self._read_offset])
        text = self._decode(self._tokens[self._prefix_offset:])
        if len(text) <= len(seen) or text.endswith(_REPLACEMENT):
            return ""
        self._prefix_offset = self._read_offset
        self._read_offset = len(self._tokens)
        return text[len(seen):]


def make_detokenizer(tokenizer: PreTrainedTokenizerBase, prompt_token_ids: Sequence[int],
                     skip_special_tokens: bool = True,
                     spaces_between_special_tokens: bool = True) -> IncrementalDetokenizer:
    """The fastest detokenizer that ``tokenizer`` supports."""
    if DecodeStream is not None and getattr(tokenizer, "backend_tokenizer", None) is not None:
        return StreamDetokenizer(tokenizer, prompt_token_ids, skip_special_tokens)
    return WindowDetokenizer(tokenizer, prompt_token_ids, skip_special_tokens, spaces_between_special_tokens)
