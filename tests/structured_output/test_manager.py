"""StructuredOutputManager: async compile, status, batch bitmasks, deferral, and the bounded cache."""

from __future__ import annotations

import time

import pytest
import torch

from infercore.config import StructuredOutputsConfig
from infercore.sampling_params import StructuredOutputsParams
from infercore.structured_output import StructuredOutputManager, apply_token_bitmask


def _wait_ready(manager: StructuredOutputManager, request_id: str) -> str:
    deadline = time.monotonic() + 10
    while manager.status(request_id).state == "pending" and time.monotonic() < deadline:
        time.sleep(0.005)
    return manager.status(request_id).state


@pytest.fixture
def manager(tokenizer, vocab_size):
    config = StructuredOutputsConfig(structured_outputs_backend="auto", grammar_cache_size=16)
    mgr = StructuredOutputManager(config, tokenizer, vocab_size)
    yield mgr
    mgr.shutdown()


def test_batch_bitmask_and_generation(manager, tokenizer, vocab_size) -> None:
    manager.submit("a", StructuredOutputsParams(choice=["yes", "no"]))
    manager.submit("b", StructuredOutputsParams(regex="[0-9]{2}"))
    assert _wait_ready(manager, "a") == "ready" and _wait_ready(manager, "b") == "ready"
    assert manager.grammar_bitmask(["plain"]) is None
    gen = torch.Generator().manual_seed(0)
    outputs: dict[str, list[int]] = {"a": [], "plain": [], "b": []}
    batch = list(outputs)
    for _ in range(8):
        bitmask = manager.grammar_bitmask(batch)
        assert bitmask is not None and bitmask.shape == (3, (vocab_size + 31) // 32)
        assert (bitmask[1] == -1).all(), "an unconstrained row must allow everything"
        logits = torch.randn(3, vocab_size, generator=gen)
        apply_token_bitmask(logits, bitmask)
        tokens = torch.multinomial(torch.softmax(logits, -1), 1, generator=gen).flatten().tolist()
        for rid, token in zip(batch, tokens):
            assert manager.accept_tokens(rid, [token])
            outputs[rid].append(token)
        batch = [rid for rid in batch if not manager.is_terminated(rid)]
        if batch == ["plain"]:
            break
    assert manager.is_terminated("a") and manager.is_terminated("b")
    assert tokenizer.decode(outputs["a"][:-1]) in ("yes", "no")
    assert len(tokenizer.decode(outputs["b"][:-1])) == 2


def test_invalid_constraint_fails_only_that_request(manager) -> None:
    manager.submit("bad", StructuredOutputsParams(regex="(unclosed"))
    manager.submit("good", StructuredOutputsParams(regex="ok"))
    assert _wait_ready(manager, "bad") == "failed"
    assert "regex" in (manager.status("bad").error or "")
    assert _wait_ready(manager, "good") == "ready"
    with pytest.raises(ValueError):
        manager.validate(StructuredOutputsParams(regex="(unclosed"))


def test_deferred_request_is_free_until_activated(manager, tokenizer) -> None:
    manager.submit("r", StructuredOutputsParams(choice=["yes"]), deferred=True)
    assert _wait_ready(manager, "r") == "ready"
    assert manager.grammar_bitmask(["r"]) is None
    assert manager.accept_tokens("r", tokenizer.encode("thinking freely"))
    manager.activate("r")
    bitmask = manager.grammar_bitmask(["r"])
    assert bitmask is not None and not (bitmask[0] == -1).all()
    assert not manager.accept_tokens("r", tokenizer.encode("no"))
    assert manager.accept_tokens("r", tokenizer.encode("yes") + [tokenizer.eos_token_id])
    assert manager.is_terminated("r")
    manager.remove("r")
    assert not manager.has_grammar("r")


def test_auto_picks_guidance_for_lark_and_unenforced_keywords(manager) -> None:
    backend = manager.backend
    assert backend.select(StructuredOutputsParams(regex="a")) is backend.xgrammar
    assert backend.select(StructuredOutputsParams(grammar='start: "a"')) is backend.guidance
    assert backend.select(StructuredOutputsParams(json={"type": "integer", "multipleOf": 2})) is backend.guidance
    with pytest.raises(ValueError, match="uniqueItems"):
        backend.validate(StructuredOutputsParams(json={"type": "array", "uniqueItems": True}))


def test_cache_stays_within_its_bound(tokenizer, vocab_size) -> None:
    config = StructuredOutputsConfig(structured_outputs_backend="xgrammar", grammar_cache_size=32)
    manager = StructuredOutputManager(config, tokenizer, vocab_size)
    try:
        for i in range(1000):
            schema = {"type": "object", "properties": {f"k{i}": {"type": "integer"}}, "required": [f"k{i}"]}
            manager.submit(f"r{i}", StructuredOutputsParams(json=schema))
            if i % 50 == 49:
                for j in range(i - 49, i + 1):
                    assert _wait_ready(manager, f"r{j}") == "ready"
                    manager.remove(f"r{j}")
                assert len(manager.cache) <= 32
        assert len(manager.cache) == 32
    finally:
        manager.shutdown()


def test_equal_constraints_share_one_compile(manager) -> None:
    manager.submit("x", StructuredOutputsParams(json='{"type": "integer",  "minimum": 1}'))
    manager.submit("y", StructuredOutputsParams(json={"minimum": 1, "type": "integer"}))
    assert _wait_ready(manager, "x") == "ready" and _wait_ready(manager, "y") == "ready"
    assert len(manager.cache) == 1


def test_unknown_backend_is_named(tokenizer, vocab_size) -> None:
    config = StructuredOutputsConfig(structured_outputs_backend="nope")
    with pytest.raises(ValueError, match="xgrammar"):
        StructuredOutputManager(config, tokenizer, vocab_size)
