"""A deliberately broken parser and grammar backend for the kit's own tests (written out as a conftest.py).

``broken_stream`` drops the spaces at the edges of every streamed piece, so a stream cut inside the text
loses them while the whole output keeps them; ``broken_bitmask`` is xgrammar with token 0 always set in
the bitmask, though its matcher refuses it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from infercore.plugin_api import (
    CompiledGrammar,
    DeltaMessage,
    ExtractedToolCalls,
    GrammarMatcher,
    StructuredOutputsParams,
    ToolParser,
    ToolRequest,
    hookimpl,
)
from infercore.plugins import get_plugin_manager
from infercore_structured_output.xgrammar_backend import XGrammarBackend


class BrokenStreamParser(ToolParser):
    def _extract_tool_calls(self, model_output: str, request: ToolRequest) -> ExtractedToolCalls:
        return ExtractedToolCalls(tools_called=False, content=model_output)

    def _extract_tool_calls_streaming(self, delta_text: str, delta_token_ids: list[int],
                                      request: ToolRequest) -> DeltaMessage | None:
        return DeltaMessage(content=delta_text.strip()) if delta_text.strip() else None

    def _flush(self, request: ToolRequest) -> DeltaMessage | None:
        return None


class _LeakyMatcher(GrammarMatcher):
    def __init__(self, inner: GrammarMatcher) -> None:
        self.inner = inner

    def accept_tokens(self, token_ids: Sequence[int]) -> bool:
        return self.inner.accept_tokens(token_ids)

    def validate_tokens(self, token_ids: Sequence[int]) -> int:
        return self.inner.validate_tokens(token_ids)

    def rollback(self, num_tokens: int) -> None:
        self.inner.rollback(num_tokens)

    def fill_bitmask(self, bitmask: torch.Tensor, row: int) -> None:
        self.inner.fill_bitmask(bitmask, row)
        bitmask[row, 0] |= 1

    def is_terminated(self) -> bool:
        return self.inner.is_terminated()

    def reset(self) -> None:
        self.inner.reset()


class _LeakyGrammar(CompiledGrammar):
    def __init__(self, inner: CompiledGrammar) -> None:
        self.inner = inner

    def matcher(self) -> GrammarMatcher:
        return _LeakyMatcher(self.inner.matcher())


class BrokenBitmaskBackend(XGrammarBackend):
    def compile(self, params: StructuredOutputsParams) -> CompiledGrammar:
        return _LeakyGrammar(super().compile(params))


class BrokenParserPlugin:
    INFERCORE_PLUGIN_API = (1, 6)

    @hookimpl
    def register_tool_parsers(self, register):
        register("broken_stream", "conftest:BrokenStreamParser")

    @hookimpl
    def register_structured_output_backends(self, register):
        register("broken_bitmask", "conftest:BrokenBitmaskBackend")


get_plugin_manager().register_module(BrokenParserPlugin(), "broken-parsers", "broken-parsers-example", "0")
