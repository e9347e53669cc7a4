"""The xgrammar backend: EBNF, JSON schema, regex and choice constraints compiled by xgrammar."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any, cast

import torch
import xgrammar as xgr

from infercore.plugin_api import (
    CompiledGrammar,
    GrammarMatcher,
    StructuredOutputBackend,
    StructuredOutputsParams,
    TokenizerInfo,
)
from infercore_structured_output.schema import ANY_OBJECT_SCHEMA, load_schema, map_subschemas, schema_keywords

#: JSON-schema keywords xgrammar accepts but does not enforce; schemas using them are refused so
#: that no output can break the schema (the auto backend hands them to llguidance instead).
UNENFORCED_KEYWORDS = frozenset({
    "allOf", "uniqueItems", "contains", "minContains", "maxContains", "not", "if", "then", "else",
    "dependentRequired", "dependentSchemas", "propertyNames", "unevaluatedProperties",
    "unevaluatedItems", "multipleOf",
})


#: A string character without escapes or control characters, as a JSON-schema pattern. Each range
#: covers code points whose UTF-8 encodings share one shape of lead and second byte: xgrammar's
#: pattern rule turns a wider range (or a negated class) into byte ranges that also accept overlong
#: encodings and surrogates, which are not UTF-8.
_PLAIN_CHAR = ("(?:[ !#-\\[\\]-\\x7f]|[\\u0080-\\u07ff]|[\\u0800-\\u0fff]|[\\u1000-\\ucfff]|[\\ud000-\\ud7ff]"
               "|[\\ue000-\\uffff]|[\\u{10000}-\\u{3ffff}]|[\\u{40000}-\\u{fffff}]|[\\u{100000}-\\u{10ffff}])")


def _length_as_pattern(schema: dict[str, Any]) -> dict[str, Any]:
    """Express minLength / maxLength of a string as a pattern.

    xgrammar's own length rule lets raw control characters into the string, which is not JSON;
    its pattern rule does not.
    """
    if "minLength" not in schema and "maxLength" not in schema:
        return schema
    if "pattern" in schema or "format" in schema:
        raise ValueError("the xgrammar backend cannot combine minLength/maxLength with pattern or format "
                         "in one string; drop one of them or use the guidance backend")
    out = dict(schema)
    low, high = out.pop("minLength", 0), out.pop("maxLength", "")
    out["pattern"] = f"^{_PLAIN_CHAR}{{{low},{high}}}$"
    return out


#: Characters of bounded strings (minLength / maxLength, summed over a schema) xgrammar compiles in well
#: under a second; its compile time grows faster than linearly past this (2,000 characters: ~10 s of CPU
#: on a 512-token vocabulary, more on real ones). Longer bounds go to llguidance, which compiles lazily.
MAX_BOUNDED_STRING_CHARS = 256


def _check_bounded_strings(schema: Any) -> None:
    """Refuse (so that ``auto`` picks llguidance) a schema whose string bounds xgrammar compiles slowly."""
    bounds: list[int] = []

    def record(sub: dict[str, Any]) -> dict[str, Any]:
        bounds.extend(int(sub[k]) for k in ("minLength", "maxLength") if isinstance(sub.get(k), int))
        return sub

    map_subschemas(schema, record)
    if sum(bounds) > MAX_BOUNDED_STRING_CHARS:
        raise ValueError(f"the xgrammar backend compiles strings bounded to {sum(bounds)} characters in all too "
                         f"slowly (limit {MAX_BOUNDED_STRING_CHARS}); use the guidance backend or auto")


def _choice_ebnf(choices: Sequence[str]) -> str:
    # JSON string literals are valid EBNF string literals in xgrammar's grammar syntax.
    return "root ::= " + " | ".join(json.dumps(c, ensure_ascii=False) for c in choices)


@functools.cache
def _batch_matcher() -> xgr.BatchGrammarMatcher:
    """xgrammar's parallel filler of many matchers' rows, shared by every engine of the process."""
    return xgr.BatchGrammarMatcher()


class XGrammarMatcher(GrammarMatcher):
    """One request's state in an xgrammar grammar."""

    def __init__(self, compiled: xgr.CompiledGrammar) -> None:
        self._matcher = xgr.GrammarMatcher(compiled)

    def accept_tokens(self, token_ids: Sequence[int]) -> bool:
        for n, token in enumerate(token_ids):
            if not self._matcher.accept_token(int(token)):
                if n:
                    self._matcher.rollback(n)
                return False
        return True

    def validate_tokens(self, token_ids: Sequence[int]) -> int:
        accepted = 0
        for token in token_ids:
            if not self._matcher.accept_token(int(token)):
                break
            accepted += 1
        if accepted:
            self._matcher.rollback(accepted)
        return accepted

    def rollback(self, num_tokens: int) -> None:
        self._matcher.rollback(num_tokens)

    def fill_bitmask(self, bitmask: torch.Tensor, row: int) -> None:
        self._matcher.fill_next_token_bitmask(bitmask, row)

    @classmethod
    def fill_bitmasks(cls, matchers: Sequence[GrammarMatcher], bitmask: torch.Tensor, rows: Sequence[int]) -> None:
        if len(matchers) == 1:
            matchers[0].fill_bitmask(bitmask, rows[0])
            return
        inner = [cast(XGrammarMatcher, m)._matcher for m in matchers]
        _batch_matcher().batch_fill_next_token_bitmask(inner, bitmask, list(rows))

    def is_terminated(self) -> bool:
        return self._matcher.is_terminated()

    def reset(self) -> None:
        self._matcher.reset()


class XGrammarCompiled(CompiledGrammar):
    """A grammar compiled by xgrammar for one vocabulary."""

    def __init__(self, compiled: xgr.CompiledGrammar) -> None:
        self.compiled = compiled

    def matcher(self) -> GrammarMatcher:
        return XGrammarMatcher(self.compiled)

    def memory_bytes(self) -> int:
        return int(self.compiled.memory_size_bytes)


class XGrammarBackend(StructuredOutputBackend):
    """Constraints compiled by xgrammar. Grammars are EBNF (``rule ::= ...``); JSON is emitted
    without free whitespace (``{"a": 1, "b": [2, 3]}``)."""

    def __init__(self, tokenizer_info: TokenizerInfo) -> None:
        super().__init__(tokenizer_info)
        info = xgr.TokenizerInfo.from_huggingface(tokenizer_info.tokenizer, vocab_size=tokenizer_info.vocab_size,
                                                  stop_token_ids=list(tokenizer_info.eos_token_ids) or None)
        # The engine's manager keeps its own bounded cache, so xgrammar's is off.
        self._compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)

    def validate(self, params: StructuredOutputsParams) -> None:
        self._grammar(params)

    def compile(self, params: StructuredOutputsParams) -> CompiledGrammar:
        return XGrammarCompiled(self._compiler.compile_grammar(self._grammar(params)))

    def _grammar(self, params: StructuredOutputsParams) -> xgr.Grammar:
        kind = params.kind
        try:
            if kind == "json" or kind == "json_object":
                schema = load_schema(params.json) if kind == "json" else ANY_OBJECT_SCHEMA
                unenforced = sorted(set(schema_keywords(schema)) & UNENFORCED_KEYWORDS)
                if unenforced:
                    raise ValueError(f"the xgrammar backend cannot enforce the JSON-schema keyword(s) "
                                     f"{', '.join(unenforced)}; remove them or use the guidance backend")
                _check_bounded_strings(schema)
                schema = map_subschemas(schema, _length_as_pattern)
                return xgr.Grammar.from_json_schema(json.dumps(schema), any_whitespace=False,
                                                    strict_mode=kind == "json")
            if kind == "regex":
                return xgr.Grammar.from_regex(params.regex or "")
            if kind == "choice":
                return xgr.Grammar.from_ebnf(_choice_ebnf(params.choice or []))
            grammar = params.grammar or ""
            if "::=" not in grammar:
                raise ValueError("the xgrammar backend reads EBNF grammars (rule ::= ...); this grammar "
                                 "is not EBNF. Write it in EBNF, or send Lark to the guidance backend")
            return xgr.Grammar.from_ebnf(grammar)
        except RuntimeError as exc:
            raise ValueError(f"the {kind} constraint is invalid: {_first_line(exc)}") from None


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
    # xgrammar prefixes its messages with a timestamp and source location.
    return text.split(": ", 1)[1] if text.startswith("[") and ": " in text else text
