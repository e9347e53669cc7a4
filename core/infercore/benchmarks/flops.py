"""Dense floating-point work of a generate call on a decoder of a workload's shape, and the compute limit.

Counts a multiply-add as two FLOPs and only the matrix products: the linear layers of every token the
model reads, causal attention over the keys before it, and the vocabulary projection of every
sampled token (the engine computes logits only where it samples). Norms, rotary and activations are
left out (under 1% at these shapes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: Dense bf16 tensor-core peak of one H200 (NVIDIA's figure without sparsity), FLOP/s.
H200_BF16_DENSE_FLOPS = 989e12


def linear_params_per_layer(config: dict[str, Any]) -> int:
    """Weights one token multiplies through in a decoder layer: q, k, v, o and a gated MLP."""
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    head_dim = config.get("head_dim") or hidden // heads
    kv_heads = config.get("num_key_value_heads") or heads
    attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
    return attention + 3 * hidden * config["intermediate_size"]


def generation_flops(config: dict[str, Any], prompt_lens: Sequence[int], output_lens: Sequence[int]) -> float:
    """FLOPs to generate ``output_lens[i]`` tokens after a prompt of ``prompt_lens[i]`` tokens, for each i.

    A request's model reads its prompt and every output token but the last (``n`` positions in all);
    position ``p`` attends to ``p + 1`` keys, so its attention costs ``4 (p + 1) head_dim heads``
    per layer, ``2 n (n + 1) head_dim heads`` summed over the request.
    """
    hidden, heads, layers = config["hidden_size"], config["num_attention_heads"], config["num_hidden_layers"]
    head_dim = config.get("head_dim") or hidden // heads
    per_token = 2 * linear_params_per_layer(config) * layers
    per_logit_row = 2 * hidden * config["vocab_size"]
    total = 0
    for prompt_len, output_len in zip(prompt_lens, output_lens, strict=True):
        positions = prompt_len + max(output_len - 1, 0)
        attention = 2 * positions * (positions + 1) * head_dim * heads * layers
        total += positions * per_token + attention + output_len * per_logit_row
    return float(total)


#: Rates one H200 reaches on the parts of a long-context run (``long_context_estimate_s``): the GEMMs of
#: prefill steps, prefill attention over a 32k-token prompt (the Triton kernel's measured rate), and the
#: decodes' KV-cache reads.
H200_GEMM_FLOPS = 700e12
H200_LONG_PREFILL_ATTENTION_FLOPS = 410e12
H200_HBM_BYTES_PER_S = 4.3e12


def kv_bytes_per_token(config: dict[str, Any], dtype_bytes: int = 2) -> int:
    """Bytes of K and V one token keeps in the cache over every layer."""
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    kv_heads = config.get("num_key_value_heads") or heads
    return 2 * kv_heads * head_dim * dtype_bytes * config["num_hidden_layers"]


def long_context_estimate_s(config: dict[str, Any], prompt_lens: Sequence[int], output_lens: Sequence[int]) -> float:
    """Seconds a long-context generate call needs on one H200 if every part ran at the rate it reaches alone:
    the linear layers and logits at :data:`H200_GEMM_FLOPS`, causal attention at
    :data:`H200_LONG_PREFILL_ATTENTION_FLOPS`, and each decode step reading its request's whole context
    from the cache at :data:`H200_HBM_BYTES_PER_S`."""
    hidden, heads, layers = config["hidden_size"], config["num_attention_heads"], config["num_hidden_layers"]
    head_dim = config.get("head_dim") or hidden // heads
    total = generation_flops(config, prompt_lens, output_lens)
    attention = sum(2 * n * (n + 1) * head_dim * heads * layers
                    for n in (p + max(o - 1, 0) for p, o in zip(prompt_lens, output_lens, strict=True)))
    # A request's first output comes from its prefill; each later one from a decode reading p + 1, ... tokens.
    kv_read = kv_bytes_per_token(config) * sum(
        max(o - 1, 0) * p + max(o - 1, 0) * o // 2 for p, o in zip(prompt_lens, output_lens, strict=True))
    return (total - attention) / H200_GEMM_FLOPS + attention / H200_LONG_PREFILL_ATTENTION_FLOPS \
        + kv_read / H200_HBM_BYTES_PER_S
