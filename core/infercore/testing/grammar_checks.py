"""Conformance checks of grammar backends: the bitmask a matcher fills allows exactly the tokens it accepts.

For each constraint kind the backend accepts in ``validate`` (a JSON schema, a regex, a choice, a JSON
object), the kit walks a matcher over a small vocabulary: at every step each token's bit must agree with
``validate_tokens``, a token the bitmask refuses must be refused by ``accept_tokens`` without changing the
state, an allowed one must be accepted, and ``rollback`` must bring back the earlier bitmask. The walk picks
allowed tokens at random (seeded) and ends when the grammar terminates or after a fixed number of steps.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch

from infercore.plugins.manager import get_plugin_manager
from infercore.sampling_params import StructuredOutputsParams
from infercore.structured_output import (
    GrammarMatcher,
    StructuredOutputBackend,
    TokenizerInfo,
    allocate_bitmask,
)
from infercore.structured_output.loader import REGISTRY_KIND

#: Each constraint kind the kit tries; a backend that refuses one in ``validate`` skips it.
CONSTRAINTS: dict[str, StructuredOutputsParams] = {
    "json schema": StructuredOutputsParams(json={
        "type": "object", "properties": {"name": {"type": "string", "maxLength": 6},
                                         "age": {"type": "integer"}},
        "required": ["name", "age"], "additionalProperties": False}),
    "regex": StructuredOutputsParams(regex=r"(yes|no), [0-9]{1,3}"),
    "choice": StructuredOutputsParams(choice=["alpha", "beta", "gamma delta"]),
    "json object": StructuredOutputsParams(json_object=True),
}
STEPS = 24


@pytest.fixture(scope="session")
def tokenizer_info(tmp_path_factory: pytest.TempPathFactory) -> TokenizerInfo:
    from transformers import AutoTokenizer

    from infercore.tiny_models import build_tokenizer

    path = build_tokenizer(tmp_path_factory.mktemp("grammar-tokenizer"), vocab_size=384)
    return TokenizerInfo.from_tokenizer(AutoTokenizer.from_pretrained(str(path)))


def _allowed(matcher: GrammarMatcher, vocab_size: int) -> torch.Tensor:
    """The tokens the matcher's bitmask allows, as a bool vector."""
    bitmask = allocate_bitmask(1, vocab_size)
    matcher.fill_bitmask(bitmask, 0)
    bits = (bitmask[0].unsqueeze(1) >> torch.arange(32, dtype=torch.int32)) & 1
    return bits.flatten()[:vocab_size].bool()


def _check_step(where: str, matcher: GrammarMatcher, allowed: torch.Tensor) -> None:
    for token in range(allowed.numel()):
        accepts = matcher.validate_tokens([token]) == 1
        assert accepts == bool(allowed[token]), (
            f"{where}: token {token} is {'allowed' if allowed[token] else 'refused'} by the bitmask but "
            f"validate_tokens {'accepts' if accepts else 'refuses'} it")


def test_bitmask_agrees_with_accepted_tokens(grammar_backend_name: str, constraint: str,
                                             tokenizer_info: TokenizerInfo) -> None:
    backend_cls: type[StructuredOutputBackend] = get_plugin_manager().registry(REGISTRY_KIND).load(
        grammar_backend_name)
    backend = backend_cls(tokenizer_info)
    params = CONSTRAINTS[constraint]
    try:
        backend.validate(params)
    except ValueError as exc:
        pytest.skip(f"grammar backend {grammar_backend_name!r} declines a {constraint}: {exc}")
    matcher = backend.compile(params).matcher()
    rng = random.Random(0)
    vocab = tokenizer_info.vocab_size
    for step in range(STEPS):
        where = f"grammar backend {grammar_backend_name!r}, {constraint}, step {step}"
        allowed = _allowed(matcher, vocab)
        _check_step(where, matcher, allowed)
        refused = [t for t in range(vocab) if not allowed[t]]
        if refused:
            token = rng.choice(refused)
            assert not matcher.accept_tokens([token]), f"{where}: accept_tokens took refused token {token}"
            assert torch.equal(_allowed(matcher, vocab), allowed), f"{where}: a refused token changed the state"
        choices = allowed.nonzero().flatten().tolist()
        if not choices or matcher.is_terminated():
            break
        token = rng.choice(choices)
        assert matcher.accept_tokens([token]), f"{where}: accept_tokens refused token {token}, which is allowed"
        if matcher.is_terminated():
            break
        matcher.rollback(1)
        assert torch.equal(_allowed(matcher, vocab), allowed), f"{where}: rollback(1) did not restore the bitmask"
        assert matcher.accept_tokens([token]), f"{where}: token {token} refused after a rollback"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One case per backend named with ``--infercore-grammar-backend`` and per constraint kind."""
    if "grammar_backend_name" not in metafunc.fixturenames:
        return
    names: list[Any] = list(metafunc.config.getoption("--infercore-grammar-backend") or [])
    if not names:
        names = [pytest.param(None, marks=pytest.mark.skip(reason="no --infercore-grammar-backend was given"))]
    metafunc.parametrize("grammar_backend_name", names)
    metafunc.parametrize("constraint", list(CONSTRAINTS), ids=[c.replace(" ", "-") for c in CONSTRAINTS])

