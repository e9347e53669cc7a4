"""StructuredOutputManager: grammar state of every constrained request, for the engine core."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Literal

import torch

from infercore.config import StructuredOutputsConfig
from infercore.plugins import Registry
from infercore.sampling_params import StructuredOutputsParams
from infercore.structured_output.backend import (
    CompiledGrammar,
    GrammarMatcher,
    StructuredOutputBackend,
    TokenizerInfo,
)
from infercore.structured_output.bitmask import allocate_bitmask
from infercore.structured_output.cache import GrammarKey, LRUCache, grammar_key


@dataclass(frozen=True)
class GrammarStatus:
    """Where a request's grammar stands: ``pending`` (compiling), ``ready``, or ``failed`` with
    ``error`` a sentence for the user."""

    state: Literal["pending", "ready", "failed"]
    error: str | None = None


@dataclass
class _RequestGrammar:
    future: Future[CompiledGrammar]
    submitted_at: float
    active: bool
    matcher: GrammarMatcher | None = None
    error: str | None = None


class StructuredOutputManager:
    """Compiles constraints off the step loop, keeps one matcher per constrained request, and
    builds the per-step bitmask.

    The engine calls :meth:`submit` when a constrained request arrives, schedules it once
    :meth:`status` is ``ready`` (failing only that request on ``failed``), asks for
    :meth:`grammar_bitmask` of each scheduled batch, feeds sampled tokens to
    :meth:`accept_tokens`, and calls :meth:`remove` when the request finishes.
    Requests submitted with ``deferred=True`` (constraint starts after reasoning) are compiled
    at once but leave the logits alone until :meth:`activate`.
    """

    def __init__(self, config: StructuredOutputsConfig, tokenizer: Any, vocab_size: int, *,
                 eos_token_ids: Sequence[int] | None = None, max_workers: int = 2,
                 registry: Registry | None = None) -> None:
        from infercore.structured_output.loader import create_backend

        self.vocab_size = vocab_size
        self.compile_timeout = config.grammar_compile_timeout
        info = TokenizerInfo.from_tokenizer(tokenizer, vocab_size, eos_token_ids)
        self.backend: StructuredOutputBackend = create_backend(config.structured_outputs_backend, info, registry)
        self.cache: LRUCache[CompiledGrammar] = LRUCache(config.grammar_cache_size)
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="grammar-compile")
        self._lock = threading.Lock()
        self._in_flight: dict[GrammarKey, Future[CompiledGrammar]] = {}
        self._requests: dict[str, _RequestGrammar] = {}

    # -- lifecycle ------------------------------------------------------------------------------
    def validate(self, params: StructuredOutputsParams) -> None:
        """Raise ``ValueError`` naming the problem when ``params`` cannot be compiled."""
        self.backend.validate(params)

    def submit(self, request_id: str, params: StructuredOutputsParams, *, deferred: bool = False) -> None:
        """Start compiling ``params`` for ``request_id`` in the background."""
        if request_id in self._requests:
            raise ValueError(f"request {request_id!r} already has a grammar; remove it first")
        future = self._compile_async(params)
        self._requests[request_id] = _RequestGrammar(future, time.monotonic(), active=not deferred)

    def activate(self, request_id: str) -> None:
        """Start constraining a request submitted with ``deferred=True`` (reasoning has ended)."""
        self._get(request_id).active = True

    def remove(self, request_id: str) -> None:
        """Forget a finished or aborted request; unknown ids are ignored. A compile still running
        goes on and fills the cache: another request may be waiting for the same grammar."""
        self._requests.pop(request_id, None)

    def shutdown(self) -> None:
        """Stop the compile threads without waiting for running compiles."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- queries --------------------------------------------------------------------------------
    def status(self, request_id: str) -> GrammarStatus:
        """``pending`` until the grammar is compiled, then ``ready`` or ``failed``."""
        entry = self._get(request_id)
        if entry.matcher is not None:
            return GrammarStatus("ready")
        if entry.error is None:
            if entry.future.done():
                self._finish(entry)
            elif time.monotonic() - entry.submitted_at > self.compile_timeout:
                entry.error = self._timeout_message()
        if entry.error is not None:
            return GrammarStatus("failed", entry.error)
        return GrammarStatus("ready" if entry.matcher is not None else "pending")

    @property
    def num_requests(self) -> int:
        """Requests that hold a grammar (compiling or in use)."""
        return len(self._requests)

    def has_grammar(self, request_id: str) -> bool:
        """True when ``request_id`` was submitted and not removed."""
        return request_id in self._requests

    def is_active(self, request_id: str) -> bool:
        """True when the request's tokens are constrained now (submitted and not deferred)."""
        entry = self._requests.get(request_id)
        return entry is not None and entry.active

    def is_terminated(self, request_id: str) -> bool:
        """True once the request's grammar is complete and an end-of-sequence token was accepted."""
        entry = self._requests.get(request_id)
        return entry is not None and entry.matcher is not None and entry.matcher.is_terminated()

    # -- per step -------------------------------------------------------------------------------
    def grammar_bitmask(self, request_ids: Sequence[str]) -> torch.Tensor | None:
        """The bitmask of a batch: one row per id, in order; rows of unconstrained (or not yet
        activated) requests allow every token. None when no request of the batch is constrained.
        A request whose grammar is still compiling is waited for, up to the compile timeout."""
        rows = [(i, rid) for i, rid in enumerate(request_ids) if self.is_active(rid)]
        if not rows:
            return None
        bitmask = allocate_bitmask(len(request_ids), self.vocab_size)
        by_class: dict[type[GrammarMatcher], tuple[list[GrammarMatcher], list[int]]] = {}
        for i, rid in rows:
            matcher = self._matcher(rid)
            matchers, indices = by_class.setdefault(type(matcher), ([], []))
            matchers.append(matcher)
            indices.append(i)
        for matcher_cls, (matchers, indices) in by_class.items():
            matcher_cls.fill_bitmasks(matchers, bitmask, indices)
        return bitmask

    def accept_tokens(self, request_id: str, token_ids: Sequence[int]) -> bool:
        """Advance the request's grammar over sampled tokens; False when one is not allowed (the
        state is then unchanged). Unconstrained and not yet activated requests accept anything."""
        if not self.is_active(request_id):
            return True
        return self._matcher(request_id).accept_tokens(token_ids)

    def validate_tokens(self, request_id: str, token_ids: Sequence[int]) -> int:
        """How many leading ``token_ids`` (e.g. speculative ones) the grammar would accept."""
        if not self.is_active(request_id):
            return len(token_ids)
        return self._matcher(request_id).validate_tokens(token_ids)

    def rollback(self, request_id: str, num_tokens: int) -> None:
        """Undo the last ``num_tokens`` accepted tokens (rejected speculative tokens)."""
        if self.is_active(request_id) and num_tokens > 0:
            self._matcher(request_id).rollback(num_tokens)

    # -- internals ------------------------------------------------------------------------------
    def _get(self, request_id: str) -> _RequestGrammar:
        entry = self._requests.get(request_id)
        if entry is None:
            raise KeyError(f"request {request_id!r} has no grammar; submit it first")
        return entry

    def _matcher(self, request_id: str) -> GrammarMatcher:
        entry = self._get(request_id)
        if entry.matcher is None and entry.error is None:
            remaining = self.compile_timeout - (time.monotonic() - entry.submitted_at)
            done, _ = wait([entry.future], timeout=max(remaining, 0.0))
            if done:
                self._finish(entry)
            else:
                entry.error = self._timeout_message()
        if entry.matcher is None:
            raise RuntimeError(f"request {request_id!r} cannot be constrained: {entry.error}; "
                               "fail the request when status() reports 'failed'")
        return entry.matcher

    def _finish(self, entry: _RequestGrammar) -> None:
        try:
            entry.matcher = entry.future.result().matcher()
        except ValueError as exc:
            entry.error = str(exc)
        except Exception as exc:  # a backend crash fails only this request
            entry.error = f"the grammar backend failed to compile this constraint: {exc!r}"

    def _timeout_message(self) -> str:
        return (f"compiling the grammar took longer than {self.compile_timeout:g} s; simplify the "
                "constraint or raise --grammar-compile-timeout")

    def _compile_async(self, params: StructuredOutputsParams) -> Future[CompiledGrammar]:
        key = grammar_key(params)
        with self._lock:
            cached = self.cache.get(key)
            if cached is not None:
                done: Future[CompiledGrammar] = Future()
                done.set_result(cached)
                return done
            future = self._in_flight.get(key)
            if future is None:
                future = self._pool.submit(self._compile, key, params)
                self._in_flight[key] = future
            return future

    def _compile(self, key: GrammarKey, params: StructuredOutputsParams) -> CompiledGrammar:
        try:
            compiled = self.backend.compile(params)
            self.cache.put(key, compiled)
            return compiled
        finally:
            with self._lock:
                self._in_flight.pop(key, None)
