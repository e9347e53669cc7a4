"""Hook implementations of this plugin: the xgrammar, guidance and auto grammar backends."""

from __future__ import annotations

from infercore.plugin_api import RegisterFn, hookimpl

INFERCORE_PLUGIN_API = (1, 6)  # parsers and grammar backends joined the plugin API in 1.6


@hookimpl
def register_structured_output_backends(register: RegisterFn) -> None:
    register("xgrammar", "infercore_structured_output.xgrammar_backend:XGrammarBackend")
    register("guidance", "infercore_structured_output.guidance_backend:GuidanceBackend")
    register("auto", "infercore_structured_output.auto_backend:AutoBackend")
