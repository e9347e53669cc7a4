"""Registers the test-only scripted model architecture."""

from infercore.plugins import hookimpl

INFERCORE_PLUGIN_API = 1


@hookimpl
def register_models(register):
    register("ScriptedForCausalLM", "infercore_scripted.model:ScriptedForCausalLM")
