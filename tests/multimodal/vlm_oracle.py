"""HF's LlavaForConditionalGeneration as the oracle (:mod:`hf_vlm_oracle`)."""

from __future__ import annotations

from hf_vlm_oracle import HFVisionOracle

MAX_NEW_TOKENS = 12


class LlavaOracle(HFVisionOracle):
    hf_class = "LlavaForConditionalGeneration"
    max_new_tokens = MAX_NEW_TOKENS
