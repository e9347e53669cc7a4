"""Registers the test platform, attention backend and model architecture."""

from infercore.plugin_api import hookimpl

INFERCORE_PLUGIN_API = (1, 0)


@hookimpl
def register_platforms(register):
    register("testdev", "infercore_testplugin.platform:TestDevPlatform", priority=-100)


@hookimpl
def register_attention_backends(register):
    register("counting", "infercore_testplugin.attention:CountingAttentionBackend")


@hookimpl
def register_models(register):
    register("TestTinyForCausalLM", "infercore_testplugin.model:TestTinyForCausalLM")
