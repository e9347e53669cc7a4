"""Finding a grammar backend by name among the registered plugins."""

from __future__ import annotations

from infercore.plugins import Registry, get_plugin_manager
from infercore.structured_output.backend import StructuredOutputBackend, TokenizerInfo

REGISTRY_KIND = "structured_output_backend"


def create_backend(name: str, tokenizer_info: TokenizerInfo,
                   registry: Registry | None = None) -> StructuredOutputBackend:
    """Build the backend registered as ``name`` (``auto`` included, when a plugin registers it)."""
    registry = registry if registry is not None else get_plugin_manager().registry(REGISTRY_KIND)
    if name not in registry:
        known = ", ".join(registry.names()) or "none (install infercore-structured-output)"
        raise ValueError(f"structured outputs backend {name!r} is not registered; choose one of: {known}")
    backend_cls = registry.load(name)
    return backend_cls(tokenizer_info)
