"""A tokenizer whose vocabulary holds every marker of the shipped formats, built once per session."""

from __future__ import annotations

from typing import Any

import pytest

from infercore.tiny_models import DEFAULT_ADDED_TOKENS, build_tokenizer

MARKERS = [
    "<|python_tag|>", "<|python_start|>", "<|python_end|>", "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]",
    "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>",
    "<｜tool▁sep｜>", "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
    "<|tool_call_argument_begin|>", "<|tool_call_end|>", "<arg_key>", "</arg_key>", "<arg_value>",
    "</arg_value>", "<|tool_call|>", "<|action_start|>", "<|action_end|>", "<|plugin|>", "<tool_calls>",
    "</tool_calls>",
]


@pytest.fixture(scope="session")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from transformers import AutoTokenizer

    path = build_tokenizer(tmp_path_factory.mktemp("tokenizer"), added_tokens=DEFAULT_ADDED_TOKENS + MARKERS)
    tok = AutoTokenizer.from_pretrained(str(path))
    vocab = tok.get_vocab()
    assert all(marker in vocab for marker in MARKERS + DEFAULT_ADDED_TOKENS)
    return tok
