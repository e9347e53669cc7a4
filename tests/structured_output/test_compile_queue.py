"""The compile queue: the deadline counts compile time only, abandoned queued compiles never run, and
constraints that admit no text fail their request."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from infercore.config import StructuredOutputsConfig
from infercore.plugins import Registry
from infercore.plugins.registry import Registration
from infercore.sampling_params import StructuredOutputsParams
from infercore.structured_output import (
    CompiledGrammar,
    StructuredOutputBackend,
    StructuredOutputManager,
    TokenizerInfo,
)
from infercore.structured_output.manager import default_compile_workers


class SlowBackend(StructuredOutputBackend):
    """xgrammar, except that a regex written ``SECONDS~PATTERN`` takes SECONDS to compile; records
    every compile it starts."""

    started: list[str] = []

    def __init__(self, tokenizer_info: TokenizerInfo) -> None:
        from infercore_structured_output.xgrammar_backend import XGrammarBackend

        super().__init__(tokenizer_info)
        self.inner = XGrammarBackend(tokenizer_info)

    @staticmethod
    def _split(params: StructuredOutputsParams) -> tuple[float, StructuredOutputsParams]:
        if params.regex is None or "~" not in params.regex:
            return 0.0, params
        seconds, pattern = params.regex.split("~", 1)
        return float(seconds), StructuredOutputsParams(regex=pattern)

    def validate(self, params: StructuredOutputsParams) -> None:
        self.inner.validate(self._split(params)[1])

    def compile(self, params: StructuredOutputsParams) -> CompiledGrammar:
        self.started.append(params.regex or params.kind)
        seconds, real = self._split(params)
        time.sleep(seconds)
        return self.inner.compile(real)


def slow(seconds: float, pattern: str) -> StructuredOutputsParams:
    return StructuredOutputsParams(regex=f"{seconds}~{pattern}")


def wait_settled(manager: StructuredOutputManager, request_id: str, limit: float = 10.0) -> str:
    deadline = time.monotonic() + limit
    while manager.status(request_id).state == "pending" and time.monotonic() < deadline:
        time.sleep(0.01)
    return manager.status(request_id).state


@pytest.fixture
def make_manager(tokenizer, vocab_size) -> Iterator:
    registry = Registry("structured_output_backend")
    registry.add(Registration("structured_output_backend", "slow", f"{__name__}:SlowBackend", "tests"))
    made: list[StructuredOutputManager] = []
    SlowBackend.started = []

    def make(timeout: float, workers: int = 1) -> StructuredOutputManager:
        config = StructuredOutputsConfig(structured_outputs_backend="slow", grammar_compile_timeout=timeout)
        manager = StructuredOutputManager(config, tokenizer, vocab_size, max_workers=workers, registry=registry)
        made.append(manager)
        return manager

    yield make
    for manager in made:
        manager.shutdown()


def test_time_queued_behind_heavy_compiles_does_not_count(make_manager) -> None:
    manager = make_manager(timeout=0.6)
    for i in range(3):
        manager.submit(f"heavy{i}", slow(0.3, f"h{i}+"))
    manager.submit("trivial", StructuredOutputsParams(choice=["yes", "no"]))
    assert wait_settled(manager, "trivial") == "ready", manager.status("trivial").error
    assert all(wait_settled(manager, f"heavy{i}") == "ready" for i in range(3))


def test_a_compile_longer_than_the_timeout_fails_its_request(make_manager) -> None:
    manager = make_manager(timeout=0.1)
    manager.submit("slow", slow(0.4, "a+"))
    assert manager.status("slow").state == "pending"
    status_at = time.monotonic()
    assert wait_settled(manager, "slow") == "failed"
    assert time.monotonic() - status_at < 0.3
    assert "grammar-compile-timeout" in (manager.status("slow").error or "")
    with pytest.raises(RuntimeError, match="cannot be constrained"):
        manager.grammar_bitmask(["slow"])


def test_abandoned_queued_compiles_never_run(make_manager) -> None:
    manager = make_manager(timeout=5.0)
    manager.submit("running", slow(0.3, "r+"))
    for i in range(4):
        manager.submit(f"gone{i}", slow(0.3, f"g{i}+"))
    manager.submit("shared-a", slow(0.05, "s+"))
    manager.submit("shared-b", slow(0.05, "s+"))
    for i in range(4):
        manager.remove(f"gone{i}")
    manager.remove("shared-a")  # shared-b still waits for the same grammar
    assert wait_settled(manager, "running") == "ready" and wait_settled(manager, "shared-b") == "ready"
    time.sleep(0.1)
    assert SlowBackend.started == ["0.3~r+", "0.05~s+"]


@pytest.mark.parametrize("params", [
    StructuredOutputsParams(json={"$ref": "#"}),
    StructuredOutputsParams(grammar='root ::= ""'),
    StructuredOutputsParams(grammar='root ::= empty\nempty ::= ""'),
    StructuredOutputsParams(regex=""),
    StructuredOutputsParams(choice=[""]),
], ids=["schema refers to itself", "empty rule", "rule of an empty rule", "empty regex", "empty choice"])
@pytest.mark.parametrize("backend", ["xgrammar", "guidance", "auto"])
def test_constraint_admitting_no_text_fails(params: StructuredOutputsParams, backend: str, tokenizer,
                                            vocab_size: int) -> None:
    config = StructuredOutputsConfig(structured_outputs_backend=backend)
    manager = StructuredOutputManager(config, tokenizer, vocab_size)
    try:
        manager.submit("r", params)
        assert wait_settled(manager, "r") == "failed"
        error = manager.status("r").error or ""
        assert any(words in error.lower() for words in ("empty reply", "circular", "no finite document")), error
    finally:
        manager.shutdown()


def test_external_ref_fails_instead_of_allowing_any_json(tokenizer, vocab_size: int) -> None:
    manager = StructuredOutputManager(StructuredOutputsConfig(), tokenizer, vocab_size)
    try:
        manager.submit("r", StructuredOutputsParams(json={"$ref": "https://example.com/schema.json"}))
        assert wait_settled(manager, "r") == "failed"
        assert "outside itself" in (manager.status("r").error or "")
    finally:
        manager.shutdown()


def test_compile_threads_leave_most_cores_to_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    for cores, threads in ((1, 1), (2, 1), (8, 2), (64, 2)):
        monkeypatch.setattr("os.cpu_count", lambda cores=cores: cores)
        assert default_compile_workers() == threads


def test_constraint_that_cannot_be_read_fails_only_its_request(tokenizer, vocab_size: int) -> None:
    manager = StructuredOutputManager(StructuredOutputsConfig(), tokenizer, vocab_size)
    try:
        manager.submit("deep", StructuredOutputsParams(json="[" * 100_000 + "]" * 100_000))
        manager.submit("fine", StructuredOutputsParams(choice=["a"]))
        assert wait_settled(manager, "deep") == "failed" and wait_settled(manager, "fine") == "ready"
    finally:
        manager.shutdown()


def test_a_queue_stuck_behind_runaway_compiles_fails_in_bounded_time(make_manager) -> None:
    manager = make_manager(timeout=0.1)
    manager.submit("runaway", slow(1.0, "r+"))  # outlives its timeout; the thread cannot be stopped
    manager.submit("queued", StructuredOutputsParams(choice=["a"]))
    assert wait_settled(manager, "runaway") == "failed"
    assert manager.status("queued").state == "pending"
    started = time.monotonic()
    assert wait_settled(manager, "queued") == "failed"
    assert time.monotonic() - started < 0.5
    assert "retry later" in (manager.status("queued").error or "")
