"""Bad constraints are refused quickly with a sentence, by validate and by compile."""

from __future__ import annotations

import time

import pytest

from infercore.sampling_params import SamplingParamsError, StructuredOutputsParams

BOUND_S = 2.0

BAD = [
    ("json", StructuredOutputsParams(json='{"type": "object", "properties": ')),
    ("json", StructuredOutputsParams(json={"type": "no-such-type"})),
    ("json", StructuredOutputsParams(json={"type": "object", "required": "name"})),
    ("json", StructuredOutputsParams(json={"$ref": "#/$defs/missing"})),
    ("regex", StructuredOutputsParams(regex="[a-z")),
    ("regex", StructuredOutputsParams(regex=r"(a)\1")),
    ("regex", StructuredOutputsParams(regex="(?=a)b")),
    ("grammar", StructuredOutputsParams(grammar="this is not a grammar (((")),
    ("grammar", StructuredOutputsParams(grammar='root ::= undefined_rule')),
]


@pytest.mark.parametrize("backend_name", ["xgrammar", "guidance"])
@pytest.mark.parametrize(("kind", "params"), BAD)
def test_bad_constraint_fails_fast(backend_name: str, kind: str, params, backends) -> None:
    backend = backends[backend_name]
    for call in (backend.validate, backend.compile):
        start = time.monotonic()
        with pytest.raises(ValueError) as info:
            call(params)
        assert time.monotonic() - start < BOUND_S
        assert len(str(info.value)) > 20


@pytest.mark.parametrize("regex", [r"(a+)+b", r"((a*)*)*d", r"(\w+\s?)+$", r"x(?:\s*\w+)+y"])
def test_nested_unbounded_repeats_are_refused_fast(regex: str) -> None:
    start = time.monotonic()
    with pytest.raises(SamplingParamsError, match="exponential time"):
        StructuredOutputsParams(regex=regex)
    assert time.monotonic() - start < BOUND_S


@pytest.mark.parametrize("backend_name", ["xgrammar", "guidance"])
@pytest.mark.parametrize("regex", [r"(a|aa)*c", r"(x{1,50}){1,50}", r"(\d+,)*\d+", r"(a+b)+"])
def test_ambiguous_but_accepted_regexes_compile_fast(backend_name: str, regex: str, backends) -> None:
    # Both engines compile regexes to automata, so ambiguity costs no backtracking.
    start = time.monotonic()
    backends[backend_name].compile(StructuredOutputsParams(regex=regex)).matcher()
    assert time.monotonic() - start < BOUND_S


def test_lark_is_refused_by_xgrammar_with_advice(backends) -> None:
    with pytest.raises(ValueError, match="EBNF"):
        backends["xgrammar"].validate(StructuredOutputsParams(grammar='start: "a" | "b"'))


def test_keywords_no_backend_enforces_are_refused(backends) -> None:
    params = StructuredOutputsParams(json={"type": "array", "uniqueItems": True})
    for backend in backends.values():
        with pytest.raises(ValueError, match="uniqueItems"):
            backend.validate(params)
