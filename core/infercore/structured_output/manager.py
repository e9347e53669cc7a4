"""StructuredOutputManager: grammar state of every constrained request, for the engine core."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
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
class _Compile:
    """One constraint being compiled, shared by the requests waiting for it. Its deadline runs from
    ``started_at`` (set when a compile thread takes it up), so time spent queued behind other
    compiles never fails a request."""

    future: Future[CompiledGrammar]
    key: GrammarKey | None = None
    started_at: float | None = None
    waiters: int = 0


#: Bytes of compiled grammars the cache keeps (xgrammar's token-mask tables grow with the vocabulary).
DEFAULT_CACHE_BYTES = 512 * 1024 * 1024

#: A request waits for a free compile thread at most this many compile timeouts; only a queue held up
#: by compiles that outlive their own timeout (which no thread can stop) takes that long.
QUEUE_TIMEOUTS = 3


@dataclass
class _RequestGrammar:
    compile: _Compile
    active: bool
    queued_at: float = field(default_factory=time.monotonic)
    matcher: GrammarMatcher | None = None
    error: str | None = None


def default_compile_workers() -> int:
    """Compile threads: one per four cores, at most two, so decoding keeps most of the CPU."""
    return max(1, min(2, (os.cpu_count() or 1) // 4))


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
                 eos_token_ids: Sequence[int] | None = None, max_workers: int | None = None,
                 registry: Registry | None = None, cache_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        from infercore.structured_output.loader import create_backend

        self.vocab_size = vocab_size
        self.compile_timeout = config.grammar_compile_timeout
        info = TokenizerInfo.from_tokenizer(tokenizer, vocab_size, eos_token_ids)
        self.backend: StructuredOutputBackend = create_backend(config.structured_outputs_backend, info, registry)
        self.cache: LRUCache[CompiledGrammar] = LRUCache(config.grammar_cache_size, max_bytes=cache_bytes,
                                                         size_of=lambda grammar: grammar.memory_bytes())
        self._pool = ThreadPoolExecutor(max_workers=max_workers or default_compile_workers(),
                                        thread_name_prefix="grammar-compile")
        self._lock = threading.Lock()
        self._in_flight: dict[GrammarKey, _Compile] = {}
        self._requests: dict[str, _RequestGrammar] = {}

    # -- lifecycle ------------------------------------------------------------------------------
    def validate(self, params: StructuredOutputsParams) -> None:
        """Raise ``ValueError`` naming the problem when ``params`` cannot be compiled."""
        self.backend.validate(params)

    def submit(self, request_id: str, params: StructuredOutputsParams, *, deferred: bool = False) -> None:
        """Start compiling ``params`` for ``request_id`` in the background."""
        if request_id in self._requests:
            raise ValueError(f"request {request_id!r} already has a grammar; remove it first")
        self._requests[request_id] = _RequestGrammar(self._compile_async(params), active=not deferred)

    def activate(self, request_id: str) -> None:
        """Start constraining a request submitted with ``deferred=True`` (reasoning has ended)."""
        self._get(request_id).active = True

    def remove(self, request_id: str) -> None:
        """Forget a finished or aborted request; unknown ids are ignored. A compile still queued that
        no other request waits for is cancelled; one already running goes on and fills the cache."""
        entry = self._requests.pop(request_id, None)
        if entry is None:
            return
        with self._lock:
            job = entry.compile
            job.waiters -= 1
            if job.waiters <= 0 and job.started_at is None and job.future.cancel():
                self._drop_in_flight(job)

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
            if entry.compile.future.done():
                self._finish(entry)
            else:
                entry.error = self._expired(entry)
        if entry.error is not None:
            return GrammarStatus("failed", entry.error)
        return GrammarStatus("ready" if entry.matcher is not None else "pending")

    def wait_for_any(self, request_ids: list[str], timeout: float) -> None:
        """Block until one of these requests' compiles is done, or ``timeout`` seconds pass."""
        futures = [entry.compile.future for rid in request_ids
                   if (entry := self._requests.get(rid)) is not None and entry.matcher is None]
        if futures:
            wait(futures, timeout=timeout, return_when=FIRST_COMPLETED)

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
            done, _ = wait([entry.compile.future], timeout=max(self._time_left(entry.compile), 0.0))
            if done:
                self._finish(entry)
            else:
                entry.error = self._expired(entry) or self._timeout_message()
        if entry.matcher is None:
            raise RuntimeError(f"request {request_id!r} cannot be constrained: {entry.error}; "
                               "fail the request when status() reports 'failed'")
        return entry.matcher

    def _finish(self, entry: _RequestGrammar) -> None:
        try:
            entry.matcher = entry.compile.future.result().matcher()
        except ValueError as exc:
            entry.error = str(exc)
        except Exception as exc:  # a backend crash fails only this request
            entry.error = f"the grammar backend failed to compile this constraint: {exc!r}"

    def _expired(self, entry: _RequestGrammar) -> str | None:
        """Why the request's compile has run (or waited for a thread) too long; None while it may go on."""
        if self._time_left(entry.compile) <= 0:
            return self._timeout_message()
        waited = time.monotonic() - entry.queued_at
        if entry.compile.started_at is None and waited > QUEUE_TIMEOUTS * self.compile_timeout:
            return (f"no grammar compile thread was free for {waited:.0f} s (the compile queue is busy with "
                    "other constraints); retry later")
        return None

    def _time_left(self, job: _Compile) -> float:
        """Seconds before the compile's deadline; the whole timeout while it is still queued."""
        started = job.started_at
        return self.compile_timeout - (0.0 if started is None else time.monotonic() - started)

    def _timeout_message(self) -> str:
        return (f"compiling the grammar took longer than {self.compile_timeout:g} s; simplify the "
                "constraint or raise --grammar-compile-timeout")

    def _compile_async(self, params: StructuredOutputsParams) -> _Compile:
        try:
            key = grammar_key(params)
        except Exception as exc:  # a constraint that cannot even be keyed fails this request only
            return _Compile(_settled(exception=ValueError(f"the constraint cannot be read: {exc!r}")),
                            started_at=time.monotonic(), waiters=1)
        with self._lock:
            cached = self.cache.get(key)
            if cached is not None:
                return _Compile(_settled(result=cached), started_at=time.monotonic(), waiters=1)
            job = self._in_flight.get(key)
            if job is None:
                job = _Compile(Future(), key)
                job.future = self._pool.submit(self._compile, params, job)
                self._in_flight[key] = job
            job.waiters += 1
            return job

    def _compile(self, params: StructuredOutputsParams, job: _Compile) -> CompiledGrammar:
        assert job.key is not None
        with self._lock:
            job.started_at = time.monotonic()
        try:
            compiled = self.backend.compile(params)
            self._check_admits_text(params, compiled)
            self.cache.put(job.key, compiled)
            return compiled
        finally:
            with self._lock:
                self._drop_in_flight(job)

    def _check_admits_text(self, params: StructuredOutputsParams, compiled: CompiledGrammar) -> None:
        """Raise ``ValueError`` when the constraint allows no first token but end-of-sequence (or none at
        all): such a constraint (``{"$ref": "#"}``, a grammar of one empty rule) can only yield an empty reply."""
        bitmask = allocate_bitmask(1, self.vocab_size)
        compiled.matcher().fill_bitmask(bitmask, 0)
        for token in self.backend.tokenizer_info.eos_token_ids:
            if 0 <= token < self.vocab_size:
                bitmask[0, token // 32] &= ~(1 << (token % 32)) if token % 32 != 31 else 0x7FFFFFFF
        if not bitmask.any():
            raise ValueError(f"the {params.kind} constraint admits no text, only an empty reply (a schema that "
                             "refers only to itself, a grammar whose rules produce nothing); give it content "
                             "the reply can hold")

    def _drop_in_flight(self, job: _Compile) -> None:
        """Forget ``job`` as the compile of its key (the caller holds the lock)."""
        if job.key is not None and self._in_flight.get(job.key) is job:
            del self._in_flight[job.key]


def _settled(*, result: CompiledGrammar | None = None,
             exception: BaseException | None = None) -> Future[CompiledGrammar]:
    """A future that is already done."""
    future: Future[CompiledGrammar] = Future()
    if exception is not None:
        future.set_exception(exception)
    else:
        assert result is not None
        future.set_result(result)
    return future
