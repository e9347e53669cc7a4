"""The front door refuses prompt text the tokenizer must not see: over the character bound (checked
before tokenizing, which took 5 s for an 8 MB prompt) or holding a lone surrogate (a TypeError in the
tokenizer, a 500 on the server) - for the offline ``LLM`` path as for the server."""

from __future__ import annotations

from typing import Any

import pytest

from infercore.frontend.input_processor import MAX_CHARS_PER_TOKEN, InputError, InputProcessor
from infercore.sampling_params import SamplingParams

MAX_MODEL_LEN = 64


class _CountingTokenizer:
    """Stands in for a tokenizer: one id per character, and counts the encode calls."""

    def __init__(self) -> None:
        self.calls = 0

    def encode(self, text: str, add_special_tokens: bool = True) -> list[Any]:
        self.calls += 1
        return [1] * len(text)


@pytest.fixture
def processor() -> InputProcessor:
    return InputProcessor(_CountingTokenizer(), MAX_MODEL_LEN, vocab_size=100, max_logprobs=5, eos_token_id=0,
                          generation_stop_ids=[])


def test_text_over_the_character_bound_is_refused_before_tokenizing(processor: InputProcessor) -> None:
    limit = MAX_MODEL_LEN * MAX_CHARS_PER_TOKEN
    with pytest.raises(InputError, match=f"{limit + 1} characters, over the limit of {limit}") as info:
        processor.process("r", "x" * (limit + 1), SamplingParams(max_tokens=1))
    assert info.value.param == "prompt" and processor.tokenizer.calls == 0


def test_lone_surrogate_is_an_input_error(processor: InputProcessor) -> None:
    with pytest.raises(InputError, match=r"lone surrogate code point \(U\+DC00 at character 2\)"):
        processor.process("r", "ab\udc00", SamplingParams(max_tokens=1))
    assert processor.tokenizer.calls == 0


def test_text_within_the_bounds_is_tokenized(processor: InputProcessor) -> None:
    processed = processor.process("r", "héllo 🙂", SamplingParams(max_tokens=1))
    assert len(processed.prompt_token_ids) == 7 and processor.tokenizer.calls == 1
