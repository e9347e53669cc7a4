"""The guidance backend: Lark / GBNF grammars, JSON schema, regex and choice through llguidance."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import llguidance
import llguidance.hf
import torch

from infercore.plugin_api import (
    CompiledGrammar,
    GrammarMatcher,
    StructuredOutputBackend,
    StructuredOutputsParams,
    TokenizerInfo,
)
from infercore_structured_output.schema import ANY_OBJECT_SCHEMA, load_schema, map_subschemas

#: Compact JSON, the same shape the xgrammar backend emits.
_JSON_OPTIONS: llguidance.JsonCompileOptions = {"whitespace_flexible": False, "item_separator": ", ",
                                                 "key_separator": ": "}


_OPEN_OBJECT_KEYWORDS = ("additionalProperties", "patternProperties", "unevaluatedProperties")


def _close_object(schema: dict[str, Any]) -> dict[str, Any]:
    """Objects that list properties get no others unless the schema asks for them, as with
    xgrammar: a model then fills in the declared fields instead of inventing new ones."""
    if "properties" not in schema or any(k in schema for k in _OPEN_OBJECT_KEYWORDS):
        return schema
    return {**schema, "additionalProperties": False}


class GuidanceMatcher(GrammarMatcher):
    """One request's state in an llguidance grammar."""

    def __init__(self, tokenizer: llguidance.LLTokenizer, grammar: str, eos_token_ids: Sequence[int]) -> None:
        self._matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
        self._eos = frozenset(eos_token_ids)
        self._terminated = False

    def accept_tokens(self, token_ids: Sequence[int]) -> bool:
        accepted = self._consume(token_ids)
        if accepted == len(token_ids):
            return True
        self._undo(accepted)
        return False

    def validate_tokens(self, token_ids: Sequence[int]) -> int:
        accepted = self._consume(token_ids)
        self._undo(accepted)
        return accepted

    def _consume(self, token_ids: Sequence[int]) -> int:
        """Consume tokens while they are allowed; returns how many were. A disallowed token is
        checked before it is consumed: consuming it would put the matcher in an error state."""
        for n, token in enumerate(int(t) for t in token_ids):
            if self._terminated:
                return n
            if token in self._eos:
                # EOS is kept out of llguidance (it neither validates nor rolls it back like other
                # tokens): it is allowed where the grammar may end, and ends the match here.
                if not self._matcher.is_accepting():
                    return n
                self._terminated = True
            elif self._matcher.validate_tokens([token]) != 1 or not self._matcher.consume_token(token):
                return n
        return len(token_ids)

    def _undo(self, num_tokens: int) -> None:
        if num_tokens:
            self.rollback(num_tokens)

    def rollback(self, num_tokens: int) -> None:
        if num_tokens > 0 and self._terminated:
            self._terminated = False
            num_tokens -= 1
        if num_tokens > 0:
            self._matcher.rollback(num_tokens)

    def fill_bitmask(self, bitmask: torch.Tensor, row: int) -> None:
        if self._terminated:
            bitmask[row] = 0
            for token in self._eos:
                bit = 1 << (token % 32)
                bitmask[row, token // 32] |= bit - (1 << 32 if bit >= 1 << 31 else 0)  # as int32
            return
        # Straight to the matcher: llguidance.torch would import torch's compiler (a second, on the
        # first constrained request) for a helper that only checks the row and passes its pointer.
        target = bitmask[row]
        if bitmask.dtype != torch.int32 or not target.is_cpu or not target.is_contiguous():
            raise ValueError("the grammar bitmask must be a contiguous int32 CPU tensor")
        self._matcher.unsafe_compute_mask_ptr(target.data_ptr(), target.numel() * target.element_size())

    def is_terminated(self) -> bool:
        return self._terminated

    def reset(self) -> None:
        self._matcher.reset()
        self._terminated = False


class GuidanceCompiled(CompiledGrammar):
    """An llguidance grammar, checked against the vocabulary."""

    def __init__(self, tokenizer: llguidance.LLTokenizer, grammar: str, eos_token_ids: Sequence[int]) -> None:
        self._tokenizer = tokenizer
        self._grammar = grammar
        self._eos = eos_token_ids

    def matcher(self) -> GrammarMatcher:
        return GuidanceMatcher(self._tokenizer, self._grammar, self._eos)

    def memory_bytes(self) -> int:
        return len(self._grammar)  # the grammar text; llguidance builds its automata per matcher


class GuidanceBackend(StructuredOutputBackend):
    """Constraints compiled by llguidance. Grammars are Lark, or GBNF when they use ``::=``."""

    def __init__(self, tokenizer_info: TokenizerInfo) -> None:
        super().__init__(tokenizer_info)
        eos = list(tokenizer_info.eos_token_ids) or None
        self._tokenizer = llguidance.hf.from_tokenizer(tokenizer_info.tokenizer, n_vocab=tokenizer_info.vocab_size,
                                                        eos_token=eos)

    def validate(self, params: StructuredOutputsParams) -> None:
        self._checked_grammar(params)

    def compile(self, params: StructuredOutputsParams) -> CompiledGrammar:
        return GuidanceCompiled(self._tokenizer, self._checked_grammar(params), self.tokenizer_info.eos_token_ids)

    def _checked_grammar(self, params: StructuredOutputsParams) -> str:
        grammar = self._grammar(params)
        error = llguidance.LLMatcher.validate_grammar(grammar, self._tokenizer)
        if error:
            raise ValueError(f"the {params.kind} constraint is invalid: {error.strip()}")
        return grammar

    @staticmethod
    def _grammar(params: StructuredOutputsParams) -> str:
        kind = params.kind
        if kind == "json" or kind == "json_object":
            schema = map_subschemas(load_schema(params.json), _close_object) if kind == "json" else ANY_OBJECT_SCHEMA
            return llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=_JSON_OPTIONS)
        if kind == "regex":
            return llguidance.LLMatcher.grammar_from_regex(params.regex or "")
        if kind == "choice":
            return llguidance.grammar_from("choice", json.dumps(params.choice))
        text = params.grammar or ""
        try:
            return llguidance.grammar_from("gbnf" if "::=" in text else "lark", text)
        except ValueError as exc:
            raise ValueError(f"the grammar constraint is invalid: {exc}") from None
