"""Batched sampling on the logits' device: penalties, biases, grammar masks, truncation, seeded draws."""

from infercore.sample.logprobs import LogprobsTensors, compute_prompt_logprobs
from infercore.sample.metadata import SamplingMetadata
from infercore.sample.sampler import Sampler, SamplerOutput

__all__ = [
    "LogprobsTensors",
    "Sampler",
    "SamplerOutput",
    "SamplingMetadata",
    "compute_prompt_logprobs",
]
