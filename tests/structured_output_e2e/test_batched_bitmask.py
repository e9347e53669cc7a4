"""Filling a batch's bitmask rows in one call gives the rows that filling them one by one gives."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from infercore.sampling_params import StructuredOutputsParams
from infercore.structured_output import TokenizerInfo, allocate_bitmask


@pytest.mark.parametrize("backend_name", ["xgrammar", "guidance"])
def test_batched_fill_matches_row_by_row(model_dir: Path, backend_name: str) -> None:
    from infercore_structured_output.guidance_backend import GuidanceBackend
    from infercore_structured_output.xgrammar_backend import XGrammarBackend

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    backend_cls = {"xgrammar": XGrammarBackend, "guidance": GuidanceBackend}[backend_name]
    backend = backend_cls(TokenizerInfo.from_tokenizer(tokenizer))
    constraints = [StructuredOutputsParams(json={"type": "array", "items": {"type": "string"}}),
                   StructuredOutputsParams(regex=r"\d{2}-[a-z]+"), StructuredOutputsParams(choice=["paris", "rome"])]
    prefixes = ['["ab", "c', "12-", "pa"]
    matchers = []
    for params, prefix in zip(constraints, prefixes):
        matcher = backend.compile(params).matcher()
        assert matcher.accept_tokens(tokenizer.encode(prefix)), prefix
        matchers.append(matcher)
    rows = [3, 0, 2]
    one_by_one = allocate_bitmask(4, len(tokenizer))
    for matcher, row in zip(matchers, rows):
        matcher.fill_bitmask(one_by_one, row)
    batched = allocate_bitmask(4, len(tokenizer))
    type(matchers[0]).fill_bitmasks(matchers, batched, rows)
    assert torch.equal(batched, one_by_one)
    assert (batched[1] == -1).all() and not (batched[rows] == -1).all()
