"""Feeding text to parsers the way the server does: token by token, or in random groups of tokens,
with incremental detokenization that never splits a character."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from infercore.parsers import DeltaMessage

Piece = tuple[str, list[int]]


class Detokenized:
    """A text's token ids and the decoded text at every token boundary where it is whole."""

    def __init__(self, tokenizer: Any, text: str) -> None:
        self.ids: list[int] = tokenizer.encode(text, add_special_tokens=False)
        decode: Callable[[list[int]], str] = lambda ids: tokenizer.decode(  # noqa: E731
            ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        assert decode(self.ids) == text, "the tokenizer must round-trip the test text"
        self.prefix: dict[int, str] = {}
        for k in range(len(self.ids) + 1):
            decoded = decode(self.ids[:k])
            if not decoded.endswith("\ufffd") and text.startswith(decoded):
                self.prefix[k] = decoded
        self.prefix[len(self.ids)] = text

    def pieces(self, cuts: list[int]) -> Iterator[Piece]:
        """Deltas for cuts after the given token counts (cuts inside a character are skipped)."""
        last = 0
        for cut in [*sorted(cuts), len(self.ids)]:
            if cut in self.prefix and cut > last:
                yield self.prefix[cut][len(self.prefix[last]):], self.ids[last:cut]
                last = cut

    def token_by_token(self) -> Iterator[Piece]:
        return self.pieces(list(range(1, len(self.ids))))

    def random_groupings(self, count: int, seed: int = 0) -> Iterator[list[Piece]]:
        rng = random.Random(seed)
        for _ in range(count):
            rate = rng.choice([0.1, 0.3, 0.6])
            yield list(self.pieces([k for k in range(1, len(self.ids)) if rng.random() < rate]))


@dataclass
class Streamed:
    """What a client assembles from a stream, checking the delta contract on the way."""

    content: str = ""
    reasoning: str = ""
    calls: list[list[str]] = field(default_factory=list)  # [id, name, arguments]

    def add(self, message: DeltaMessage | None) -> None:
        if message is None:
            return
        assert message.content is None or message.content, "empty content is sent as None"
        self.content += message.content or ""
        self.reasoning += message.reasoning or ""
        for delta in message.tool_calls:
            fragment = delta.function.arguments or ""
            if delta.index == len(self.calls):
                assert delta.id and delta.type == "function" and delta.function.name, delta
                self.calls.append([delta.id, delta.function.name, fragment])
            else:
                assert delta.index < len(self.calls), "calls are numbered in order from 0"
                assert delta.id is None and delta.type is None and delta.function.name is None, delta
                assert fragment, "a later delta carries argument text"
                self.calls[delta.index][2] += fragment

    def named_calls(self) -> list[tuple[str, str]]:
        return [(name, arguments) for _, name, arguments in self.calls]
