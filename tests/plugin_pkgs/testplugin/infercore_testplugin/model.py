"""A model architecture from a plugin: Qwen3's decoder, counting forward calls."""

from infercore.models.qwen3 import Qwen3ForCausalLM

CALLS = {"forward": 0}


class TestTinyForCausalLM(Qwen3ForCausalLM):
    def forward(self, input_ids, positions):
        CALLS["forward"] += 1
        return super().forward(input_ids, positions)
