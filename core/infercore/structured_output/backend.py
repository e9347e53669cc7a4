"""The grammar-backend interface: what a plugin implements to constrain decoding."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from infercore.sampling_params import StructuredOutputsParams

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class TokenizerInfo:
    """What a grammar backend needs to know of the vocabulary.

    ``vocab_size`` is the model's (the width of its logits), which may exceed the tokenizer's
    length when the embedding is padded; ids past the tokenizer are never allowed by a grammar.
    """

    tokenizer: Any
    vocab_size: int
    eos_token_ids: tuple[int, ...]

    @classmethod
    def from_tokenizer(cls, tokenizer: Any, vocab_size: int | None = None,
                       eos_token_ids: Sequence[int] | None = None) -> TokenizerInfo:
        """Describe a Hugging Face tokenizer; ``vocab_size`` defaults to its length and
        ``eos_token_ids`` to its EOS token."""
        size = len(tokenizer) if vocab_size is None else vocab_size
        if size < len(tokenizer):
            raise ValueError(f"vocab_size {size} is smaller than the tokenizer's {len(tokenizer)} tokens; "
                             "pass the model's vocabulary size")
        if eos_token_ids is None:
            eos_token_ids = [] if tokenizer.eos_token_id is None else [tokenizer.eos_token_id]
        return cls(tokenizer, size, tuple(int(t) for t in eos_token_ids))


class GrammarMatcher(ABC):
    """The grammar state of one request: which tokens may come next, and the tokens accepted so far."""

    @abstractmethod
    def accept_tokens(self, token_ids: Sequence[int]) -> bool:
        """Advance over ``token_ids``. All or nothing: when one is not allowed, the state is
        left as it was and the result is False."""

    @abstractmethod
    def validate_tokens(self, token_ids: Sequence[int]) -> int:
        """How many leading ``token_ids`` the grammar would accept, without accepting them."""

    @abstractmethod
    def rollback(self, num_tokens: int) -> None:
        """Undo the last ``num_tokens`` accepted tokens."""

    @abstractmethod
    def fill_bitmask(self, bitmask: torch.Tensor, row: int) -> None:
        """Write the allowed next tokens into ``bitmask[row]`` (CPU int32, bit ``t % 32`` of word
        ``t // 32`` set when token ``t`` is allowed)."""

    @classmethod
    def fill_bitmasks(cls, matchers: Sequence[GrammarMatcher], bitmask: torch.Tensor, rows: Sequence[int]) -> None:
        """Fill ``bitmask[rows[i]]`` for ``matchers[i]``, all of them of this class. Backends whose
        engine fills many rows in one call (in parallel) override this; the default goes row by row."""
        for matcher, row in zip(matchers, rows):
            matcher.fill_bitmask(bitmask, row)

    @abstractmethod
    def is_terminated(self) -> bool:
        """True once the grammar is complete and an end-of-sequence token was accepted."""

    @abstractmethod
    def reset(self) -> None:
        """Return to the start state."""


class CompiledGrammar(ABC):
    """A constraint compiled for one vocabulary; immutable and shared by every request using it."""

    @abstractmethod
    def matcher(self) -> GrammarMatcher:
        """A fresh matcher in the start state."""

    def memory_bytes(self) -> int:
        """About how many bytes the compiled grammar holds, for the cache's memory bound; 0 when unknown."""
        return 0


class StructuredOutputBackend(ABC):
    """A grammar engine. Plugins register subclasses through
    ``register_structured_output_backends``; the class is built once per engine with the
    vocabulary description and must be safe to call ``compile`` from several threads."""

    def __init__(self, tokenizer_info: TokenizerInfo) -> None:
        self.tokenizer_info = tokenizer_info

    @abstractmethod
    def validate(self, params: StructuredOutputsParams) -> None:
        """Raise ``ValueError`` with a sentence naming the problem when ``params`` cannot be
        compiled by this backend. Fast (milliseconds): the server calls it per request."""

    @abstractmethod
    def compile(self, params: StructuredOutputsParams) -> CompiledGrammar:
        """Compile ``params``; raise ``ValueError`` when it is invalid."""
