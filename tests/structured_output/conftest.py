"""Fixtures: a tiny trained tokenizer, the backends over a padded vocabulary, and a random "model"."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from infercore.structured_output import GrammarMatcher, TokenizerInfo, allocate_bitmask, apply_token_bitmask
from infercore.tiny_models import build_tokenizer

#: Model vocabulary padded past the tokenizer's length, as real checkpoints often are.
PADDING = 21


@pytest.fixture(scope="session")
def tokenizer(tmp_path_factory: pytest.TempPathFactory):
    path = build_tokenizer(Path(tmp_path_factory.mktemp("tok")))
    return AutoTokenizer.from_pretrained(str(path))


@pytest.fixture(scope="session")
def vocab_size(tokenizer) -> int:
    return len(tokenizer) + PADDING


@pytest.fixture(scope="session")
def tokenizer_info(tokenizer, vocab_size: int) -> TokenizerInfo:
    return TokenizerInfo.from_tokenizer(tokenizer, vocab_size)


@pytest.fixture(scope="session")
def backends(tokenizer_info: TokenizerInfo):
    from infercore_structured_output.guidance_backend import GuidanceBackend
    from infercore_structured_output.xgrammar_backend import XGrammarBackend

    return {"xgrammar": XGrammarBackend(tokenizer_info), "guidance": GuidanceBackend(tokenizer_info)}


class RandomModel:
    """Samples from random logits masked by the grammar; after ``wind_down`` tokens it favours
    tokens that close strings, objects and arrays so bounded outputs finish in a few hundred steps."""

    def __init__(self, tokenizer, vocab_size: int, wind_down: int = 40) -> None:
        self.vocab_size = vocab_size
        self.wind_down = wind_down
        closers = ['"', "}", "]", "]\"", "\"}"]
        ids = {i for text in closers for i in tokenizer.encode(text)} | {tokenizer.eos_token_id}
        self.closers = torch.tensor(sorted(ids))

    def generate(self, matcher: GrammarMatcher, seed: int, cap: int = 400) -> tuple[list[int], bool]:
        """Tokens generated before the end-of-sequence token, and whether the grammar terminated."""
        gen = torch.Generator().manual_seed(seed)
        out: list[int] = []
        for step in range(cap):
            bitmask = allocate_bitmask(1, self.vocab_size)
            matcher.fill_bitmask(bitmask, 0)
            logits = torch.randn(1, self.vocab_size, generator=gen) * 2
            if step >= self.wind_down:
                logits[0, self.closers] += 6.0
            apply_token_bitmask(logits, bitmask)
            token = int(torch.multinomial(torch.softmax(logits, -1), 1, generator=gen))
            assert token < self.vocab_size - PADDING, "a padding token was allowed"
            assert matcher.accept_tokens([token]), f"the grammar refused token {token} that its mask allowed"
            if matcher.is_terminated():
                return out, True
            out.append(token)
        return out, False


@pytest.fixture(scope="session")
def model(tokenizer, vocab_size: int) -> RandomModel:
    return RandomModel(tokenizer, vocab_size)
