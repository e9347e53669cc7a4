"""Turning the engine's compact ``Logprobs`` into the per-position ``{token_id: Logprob}`` dicts users see."""

from __future__ import annotations

from transformers import PreTrainedTokenizerBase

from infercore.outputs import Logprob
from infercore.wire.messages import Logprobs


class LogprobsConverter:
    """Converts wire logprobs, with each token's text when a tokenizer is given (cached per token id)."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase | None) -> None:
        self._tokenizer = tokenizer
        self._texts: dict[int, str] = {}

    def token_text(self, token_id: int) -> str | None:
        """The text of one token on its own (special tokens included)."""
        if self._tokenizer is None:
            return None
        text = self._texts.get(token_id)
        if text is None:
            text = self._texts[token_id] = self._tokenizer.decode([token_id])
        return text

    def position(self, wire: Logprobs, i: int) -> dict[int, Logprob]:
        """Position ``i``: the chosen token with its rank, then the top-k with ranks 1..k."""
        ids, values = wire.token_ids[i], wire.logprobs[i]
        out = {ids[0]: Logprob(values[0], wire.ranks[i], self.token_text(ids[0]))}
        for rank, (token_id, value) in enumerate(zip(ids[1:], values[1:]), start=1):
            if token_id not in out:
                out[token_id] = Logprob(value, rank, self.token_text(token_id))
        return out

    def convert(self, wire: Logprobs) -> list[dict[int, Logprob]]:
        """Every position of ``wire``."""
        return [self.position(wire, i) for i in range(len(wire.token_ids))]
