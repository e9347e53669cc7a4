"""A throwaway plugin whose parts raise for chosen requests only: a tool parser that raises (from its
public methods, which the base class would otherwise guard) when the request offers a tool named
``explode``, and a grammar backend whose matcher raises while masking or accepting tokens when the
request's choice is ``["explode-mask"]`` or ``["explode-accept"]``. Other requests get a parser that
returns the text as content and a grammar that allows every token."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from infercore.parsers import DeltaMessage, ToolParser, ToolRequest
from infercore.parsers.types import ExtractedToolCalls
from infercore.plugins import hookimpl
from infercore.plugins.hookspecs import RegisterFn
from infercore.sampling_params import StructuredOutputsParams
from infercore.structured_output.backend import CompiledGrammar, GrammarMatcher, StructuredOutputBackend
from infercore.version import PLUGIN_API_VERSION

INFERCORE_PLUGIN_API = PLUGIN_API_VERSION
EXPLODE_TOOL = "explode"
EXPLODE_MASK = "explode-mask"
EXPLODE_ACCEPT = "explode-accept"


class InjectedFault(RuntimeError):
    """The error this plugin raises on purpose."""


def _explodes(request: ToolRequest) -> bool:
    return any(tool.get("function", {}).get("name") == EXPLODE_TOOL for tool in request.tools)


class FaultyToolParser(ToolParser):
    """Raises from every method for requests offering the ``explode`` tool; else text is content."""

    def extract_tool_calls(self, model_output: str, request: ToolRequest, *,
                           truncated: bool = False) -> ExtractedToolCalls:
        if _explodes(request):
            raise InjectedFault("tool parser failed on purpose")
        return ExtractedToolCalls(tools_called=False, content=model_output)

    def extract_tool_calls_streaming(self, delta_text: str, delta_token_ids: list[int],
                                     request: ToolRequest) -> DeltaMessage | None:
        if _explodes(request):
            raise InjectedFault("streaming tool parser failed on purpose")
        return DeltaMessage(content=delta_text) if delta_text else None

    def flush(self, request: ToolRequest, *, truncated: bool = False) -> DeltaMessage | None:
        if _explodes(request):
            raise InjectedFault("tool parser flush failed on purpose")
        return None

    def _extract_tool_calls(self, model_output: str, request: ToolRequest) -> ExtractedToolCalls:
        raise NotImplementedError  # the public methods above are the whole parser

    def _extract_tool_calls_streaming(self, delta_text: str, delta_token_ids: list[int],
                                      request: ToolRequest) -> DeltaMessage | None:
        raise NotImplementedError

    def _flush(self, request: ToolRequest) -> DeltaMessage | None:
        raise NotImplementedError


class FaultyMatcher(GrammarMatcher):
    """Allows every token; raises while masking or accepting when its choice asks for it."""

    def __init__(self, fault: str | None) -> None:
        self.fault = fault

    def accept_tokens(self, token_ids: Sequence[int]) -> bool:
        if self.fault == EXPLODE_ACCEPT:
            raise InjectedFault("grammar matcher failed to accept tokens on purpose")
        return True

    def validate_tokens(self, token_ids: Sequence[int]) -> int:
        return len(token_ids)

    def rollback(self, num_tokens: int) -> None:
        pass

    def fill_bitmask(self, bitmask: torch.Tensor, row: int) -> None:
        if self.fault == EXPLODE_MASK:
            raise InjectedFault("grammar matcher failed to fill its bitmask on purpose")
        bitmask[row].fill_(-1)

    def is_terminated(self) -> bool:
        return False

    def reset(self) -> None:
        pass


class FaultyGrammar(CompiledGrammar):
    """A compiled constraint that remembers which fault to inject."""

    def __init__(self, fault: str | None) -> None:
        self.fault = fault

    def matcher(self) -> GrammarMatcher:
        return FaultyMatcher(self.fault)


class FaultyBackend(StructuredOutputBackend):
    """Compiles any constraint at once; a choice of ``explode-mask`` / ``explode-accept`` injects a fault."""

    def validate(self, params: StructuredOutputsParams) -> None:
        pass

    def compile(self, params: StructuredOutputsParams) -> CompiledGrammar:
        choice = params.choice or []
        return FaultyGrammar(choice[0] if choice and choice[0] in (EXPLODE_MASK, EXPLODE_ACCEPT) else None)


@hookimpl
def register_tool_parsers(register: RegisterFn) -> None:
    register("faulty", "faulty_plugin:FaultyToolParser")


@hookimpl
def register_structured_output_backends(register: RegisterFn) -> None:
    register("faulty", "faulty_plugin:FaultyBackend")
