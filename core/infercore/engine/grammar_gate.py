"""Holds constrained requests until their grammar compiles, and feeds grammars the engine's tokens."""

from __future__ import annotations

import logging
from typing import Any

import torch

from infercore.config import InfercoreConfig
from infercore.parsers import ReasoningParser, get_reasoning_parser
from infercore.scheduler.request import Request
from infercore.scheduler.scheduler import Scheduler
from infercore.wire.messages import EngineCoreOutput, EngineCoreOutputs, FinishReason
from infercore.wire.scheduler_output import SchedulerOutput

logger = logging.getLogger(__name__)


class GrammarGate:
    """EngineCore's link to the structured-output manager (created on the first constrained request).

    A constrained request waits here while its grammar compiles off the step loop; a failed
    compile fails that request alone, and so does a grammar that raises while masking or accepting
    tokens (it is dropped and the engine fails the request after the step, see :meth:`take_faulted`).
    With a reasoning parser configured, a request whose prompt leaves reasoning open is constrained
    only from the token after its reasoning ends.
    """

    def __init__(self, config: InfercoreConfig, vocab_size: int, stop_ids: list[int]) -> None:
        self.config = config
        self.vocab_size = vocab_size
        self.stop_ids = stop_ids
        self.manager: Any = None
        self.tokenizer: Any = None
        self.pending: dict[str, Request] = {}
        #: Requests still reasoning: their parser, and the request whose tokens it reads.
        self.reasoning: dict[str, tuple[ReasoningParser, Request]] = {}
        #: Requests whose grammar raised this step, with the error to fail them with.
        self._faulted: dict[str, str] = {}

    def _ensure_manager(self) -> Any:
        if self.manager is None:
            from infercore.structured_output import StructuredOutputManager
            from infercore.tokenizer import get_tokenizer

            self.tokenizer = get_tokenizer(self.config.model)
            self.manager = StructuredOutputManager(self.config.structured_outputs, self.tokenizer, self.vocab_size,
                                                   eos_token_ids=self.stop_ids)
        return self.manager

    def submit(self, request: Request) -> None:
        params = request.sampling_params.structured_outputs
        assert params is not None
        manager = self._ensure_manager()
        parser_name = self.config.serve.reasoning_parser
        parser = get_reasoning_parser(parser_name, self.tokenizer) if parser_name else None
        deferred = parser is not None and not parser.is_reasoning_end(request.all_token_ids)
        manager.submit(request.request_id, params, deferred=deferred)
        if deferred:
            assert parser is not None
            self.reasoning[request.request_id] = (parser, request)
        self.pending[request.request_id] = request

    def has_requests(self) -> bool:
        """Whether any constrained request is waiting or running (they need synchronous steps)."""
        return bool(self.pending) or (self.manager is not None and self.manager.num_requests > 0)

    def wait_for_compiles(self, timeout: float) -> None:
        """Block until a pending request's grammar is compiled (or ``timeout`` passes): an engine with
        nothing else to do waits here instead of spinning beside the compile threads."""
        if self.pending and self.manager is not None:
            self.manager.wait_for_any(list(self.pending), timeout)

    def admit_ready(self, scheduler: Scheduler) -> list[EngineCoreOutput]:
        """Move compiled requests into the scheduler; error outputs for failed compiles."""
        failed: list[EngineCoreOutput] = []
        for req_id in list(self.pending):
            status = self.manager.status(req_id)
            if status.state == "pending":
                continue
            request = self.pending.pop(req_id)
            error = status.error or "the constraint could not be compiled"
            if status.state == "ready":
                try:
                    scheduler.add_request(request)
                    continue
                except ValueError as exc:  # the scheduler cannot take it: fail it alone
                    error = str(exc)
            self.reasoning.pop(req_id, None)
            self.manager.remove(req_id)
            failed.append(EngineCoreOutput(req_id, [], finish_reason=FinishReason.ERROR, error=error))
        return failed

    def abort(self, request_ids: list[str]) -> None:
        if self.manager is None:
            return
        for req_id in request_ids:
            self.pending.pop(req_id, None)
            self.reasoning.pop(req_id, None)
            self.manager.remove(req_id)

    def bitmask(self, scheduler: Scheduler, so: SchedulerOutput) -> torch.Tensor | None:
        """One row per request that samples this step, in batch order (None if none is constrained)."""
        if self.manager is None:
            return None
        sampled = []
        constrained = False
        for req_id in so.req_ids:
            # A step that samples a request has counted that sample as a placeholder token.
            if scheduler.requests[req_id].num_output_placeholders > 0:
                sampled.append(req_id)
                constrained = constrained or self.manager.has_grammar(req_id)
        if not constrained:
            return None
        try:
            return self.manager.grammar_bitmask(sampled)
        except Exception:
            self._drop_masking_faults(sampled)
            if not any(self.manager.has_grammar(req_id) for req_id in sampled):
                return None
            return self.manager.grammar_bitmask(sampled)

    def _drop_masking_faults(self, req_ids: list[str]) -> None:
        """Find the requests whose grammar cannot fill its bitmask row, one by one, and drop them."""
        for req_id in req_ids:
            if not self.manager.has_grammar(req_id):
                continue
            try:
                self.manager.grammar_bitmask([req_id])
            except Exception as exc:
                self._fault(req_id, "masking tokens", exc)

    def _fault(self, req_id: str, doing: str, exc: Exception) -> None:
        logger.warning("the grammar of request %s failed while %s: %s", req_id, doing, exc, exc_info=exc)
        self._faulted[req_id] = f"the constraint failed while {doing} ({type(exc).__name__}); the request was stopped"
        self.reasoning.pop(req_id, None)
        self.manager.remove(req_id)

    def take_faulted(self) -> dict[str, str]:
        """Requests whose grammar raised since the last call, with their error; the engine fails them."""
        faulted, self._faulted = self._faulted, {}
        return faulted

    def after_step(self, outputs: EngineCoreOutputs) -> None:
        """Advance each constrained request's matcher; start the constraint of requests whose
        reasoning just ended; forget finished ones."""
        if self.manager is None:
            return
        for out in outputs.outputs:
            if not self.manager.has_grammar(out.request_id):
                continue
            try:
                accepted = not out.new_token_ids or self.manager.accept_tokens(out.request_id, out.new_token_ids)
            except Exception as exc:
                self._fault(out.request_id, "accepting tokens", exc)
                continue
            if not accepted:
                logger.warning("request %s produced a token its grammar rejects", out.request_id)
            if out.finished:
                self.reasoning.pop(out.request_id, None)
                self.manager.remove(out.request_id)
            elif out.new_token_ids and out.request_id in self.reasoning:
                parser, request = self.reasoning[out.request_id]
                if parser.is_reasoning_end(request.all_token_ids):
                    del self.reasoning[out.request_id]
                    self.manager.activate(out.request_id)

    def shutdown(self) -> None:
        if self.manager is not None:
            self.manager.shutdown()
