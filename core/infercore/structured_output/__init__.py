"""Constrained decoding: the grammar-backend interface, the engine's manager and the bitmask."""

from infercore.structured_output.backend import (
    CompiledGrammar,
    GrammarMatcher,
    StructuredOutputBackend,
    TokenizerInfo,
)
from infercore.structured_output.bitmask import (
    allocate_bitmask,
    apply_token_bitmask,
    apply_token_bitmask_torch,
    bitmask_width,
)
from infercore.structured_output.loader import create_backend
from infercore.structured_output.manager import GrammarStatus, StructuredOutputManager

__all__ = [
    "CompiledGrammar",
    "GrammarMatcher",
    "GrammarStatus",
    "StructuredOutputBackend",
    "StructuredOutputManager",
    "TokenizerInfo",
    "allocate_bitmask",
    "apply_token_bitmask",
    "apply_token_bitmask_torch",
    "bitmask_width",
    "create_backend",
]
