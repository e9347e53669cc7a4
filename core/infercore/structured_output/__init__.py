"""Constrained decoding: the grammar-backend interface, the engine's manager and the bitmask.

The names below load on first use, so that the API server, which needs only ``admission``'s bounds, imports no
backend, bitmask or torch."""

from __future__ import annotations

from infercore.lazy_names import lazy_getattr

_NAMES = {
    "CompiledGrammar": "infercore.structured_output.backend",
    "GrammarMatcher": "infercore.structured_output.backend",
    "StructuredOutputBackend": "infercore.structured_output.backend",
    "TokenizerInfo": "infercore.structured_output.backend",
    "allocate_bitmask": "infercore.structured_output.bitmask",
    "apply_token_bitmask": "infercore.structured_output.bitmask",
    "apply_token_bitmask_torch": "infercore.structured_output.bitmask",
    "bitmask_width": "infercore.structured_output.bitmask",
    "create_backend": "infercore.structured_output.loader",
    "GrammarStatus": "infercore.structured_output.manager",
    "StructuredOutputManager": "infercore.structured_output.manager",
}

__all__ = sorted(_NAMES)

__getattr__ = lazy_getattr(__name__, _NAMES)
