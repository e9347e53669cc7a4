"""The ``auto`` backend: xgrammar first, llguidance for what xgrammar cannot do."""

from __future__ import annotations

from infercore.plugin_api import (
    CompiledGrammar,
    StructuredOutputBackend,
    StructuredOutputsParams,
    TokenizerInfo,
)
from infercore_structured_output.guidance_backend import GuidanceBackend
from infercore_structured_output.xgrammar_backend import XGrammarBackend


class AutoBackend(StructuredOutputBackend):
    """Sends each constraint to xgrammar when xgrammar accepts it, otherwise to llguidance (JSON
    schemas with keywords xgrammar does not enforce, Lark grammars). A constraint neither accepts
    is reported with llguidance's reason."""

    def __init__(self, tokenizer_info: TokenizerInfo) -> None:
        super().__init__(tokenizer_info)
        self.xgrammar = XGrammarBackend(tokenizer_info)
        self.guidance = GuidanceBackend(tokenizer_info)

    def select(self, params: StructuredOutputsParams) -> StructuredOutputBackend:
        """The backend that will compile ``params``; raises ``ValueError`` when none can."""
        try:
            self.xgrammar.validate(params)
            return self.xgrammar
        except ValueError:
            self.guidance.validate(params)
            return self.guidance

    def validate(self, params: StructuredOutputsParams) -> None:
        self.select(params)

    def compile(self, params: StructuredOutputsParams) -> CompiledGrammar:
        return self.select(params).compile(params)
