"""Registers the test-only scripted model architecture."""

from infercore.plugin_api import hookimpl

INFERCORE_PLUGIN_API = (1, 0)


@hookimpl
def register_models(register):
    register("ScriptedForCausalLM", "infercore_scripted.model:ScriptedForCausalLM")
