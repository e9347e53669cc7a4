"""Regex, choice and grammar constraints: every sampled output matches."""

from __future__ import annotations

import re

import pytest

from infercore.sampling_params import StructuredOutputsParams

REGEXES = [r"[a-z]{1,6}@[a-z]{2,5}\.(com|org)", r"-?(0|[1-9][0-9]{0,3})(\.[0-9]{1,2})?",
           r"(yes|no|maybe)!?", r"\d{3}-\d{4}", r"[A-Z][a-z ]{0,10}\."]
BACKENDS = ["xgrammar", "guidance"]


@pytest.mark.parametrize("backend_name", BACKENDS)
@pytest.mark.parametrize("regex", REGEXES)
def test_regex_outputs_match(backend_name: str, regex: str, backends, model, tokenizer) -> None:
    compiled = backends[backend_name].compile(StructuredOutputsParams(regex=regex))
    for seed in range(10):
        tokens, terminated = model.generate(compiled.matcher(), seed=seed)
        assert terminated
        assert re.fullmatch(regex, tokenizer.decode(tokens)), tokenizer.decode(tokens)


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_choice_outputs_are_choices(backend_name: str, backends, model, tokenizer) -> None:
    choices = ["Paris", "London", "Tokyo", 'say "hi"\n', "naïve café", "a\\b"]
    compiled = backends[backend_name].compile(StructuredOutputsParams(choice=choices))
    seen = set()
    for seed in range(40):
        tokens, terminated = model.generate(compiled.matcher(), seed=seed)
        assert terminated
        text = tokenizer.decode(tokens)
        assert text in choices
        seen.add(text)
    assert len(seen) > 2


@pytest.mark.parametrize(("backend_name", "grammar"), [
    ("xgrammar", 'root ::= "(" num ("+" num)* ")"\nnum ::= [0-9] | [1-9] [0-9]'),
    ("guidance", 'root ::= "(" num ("+" num)* ")"\nnum ::= [0-9] | [1-9] [0-9]'),
    ("guidance", 'start: "(" num ("+" num)* ")"\nnum: /[0-9]|[1-9][0-9]/'),
])
def test_grammar_outputs_match(backend_name: str, grammar: str, backends, model, tokenizer) -> None:
    compiled = backends[backend_name].compile(StructuredOutputsParams(grammar=grammar))
    for seed in range(10):
        tokens, terminated = model.generate(compiled.matcher(), seed=seed)
        assert terminated
        assert re.fullmatch(r"\((\d|[1-9]\d)(\+(\d|[1-9]\d))*\)", tokenizer.decode(tokens))


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_matcher_accept_rollback_reset(backend_name: str, backends, tokenizer) -> None:
    matcher = backends[backend_name].compile(StructuredOutputsParams(choice=["yes", "no"])).matcher()
    yes = tokenizer.encode("yes")
    bad = tokenizer.encode("x")
    eos = tokenizer.eos_token_id
    assert matcher.validate_tokens(yes + [eos]) == len(yes) + 1
    assert not matcher.accept_tokens(yes[:1] + bad), "a disallowed token was accepted"
    assert matcher.validate_tokens(yes) == len(yes), "a refused batch must leave the state unchanged"
    assert matcher.accept_tokens(yes)
    assert not matcher.is_terminated()
    assert matcher.accept_tokens([eos])
    assert matcher.is_terminated()
    matcher.rollback(1)
    assert not matcher.is_terminated()
    matcher.reset()
    assert matcher.accept_tokens(tokenizer.encode("no") + [eos])
    assert matcher.is_terminated()
