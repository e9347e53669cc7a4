"""A model architecture from a plugin: core's Qwen3 decoder, counting forward calls."""

from infercore.plugin_api import model_class

CALLS = {"forward": 0}


class TestTinyForCausalLM(model_class("Qwen3ForCausalLM")):
    def forward(self, input_ids, positions):
        CALLS["forward"] += 1
        return super().forward(input_ids, positions)
