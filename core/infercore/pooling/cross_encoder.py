"""Cross-encoder inputs: a (query, document) pair as one sequence, as the model's tokenizer joins pairs
(``[CLS] a [SEP] b [SEP]`` for BERT, whose segment ids the model derives from the separator)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def pair_token_ids(tokenizer: Any, lefts: Sequence[str], rights: Sequence[str]) -> list[list[int]]:
    """Token ids of each pair ``(lefts[i], rights[i])`` joined by the tokenizer."""
    if tokenizer is None:
        raise ValueError("scoring text pairs with a cross-encoder needs the tokenizer; do not set skip_tokenizer_init")
    if len(lefts) != len(rights):
        raise ValueError(f"{len(lefts)} first texts for {len(rights)} second texts; pair them one to one")
    return [list(ids) for ids in tokenizer(list(lefts), list(rights))["input_ids"]]


def pair_prompts(llm: Any, lefts: Sequence[str], rights: Sequence[str]) -> list[dict[str, Any]]:
    """The engine prompts of the pairs for an offline ``LLM``."""
    return [{"prompt_token_ids": ids} for ids in pair_token_ids(llm.get_tokenizer(), lefts, rights)]
