"""Encoder-only attention: every token of a sequence attends to every other token of it (bidirectional),
and nothing is read from or written to a KV cache.

Encoder models (BERT, XLM-RoBERTa) declare it on their :class:`~infercore.attention.Attention` layers
(``attn_type=ENCODER_ONLY``). A backend that runs it sets
:attr:`~infercore.attention.AttentionBackend.supports_encoder_only` and, in its impl's ``forward``, calls
:func:`encoder_only_attention` or a kernel of its own when ``self.spec.attn_type`` is ``ENCODER_ONLY``.
The engine computes such a model's prompts in one step each (no chunked prefill, no prefix cache) and
gives it no KV cache memory.
"""

from __future__ import annotations

from typing import Any

import torch

from infercore.ops.encoder_attention import encoder_attention

#: The attention types of the plugin API (``AttentionLayerSpec.attn_type``).
DECODER = "decoder"
ENCODER_ONLY = "encoder_only"
ATTENTION_TYPES = (DECODER, ENCODER_ONLY)


def encoder_only_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, query_start_loc_cpu: torch.Tensor,
                           num_reqs: int, scale: float, out: torch.Tensor) -> torch.Tensor:
    """Bidirectional attention within each request: the reference every backend is checked against.

    ``q``/``out`` are [T, heads, D], ``k``/``v`` [T, kv_heads, D] (GQA); request ``i`` owns tokens
    ``query_start_loc_cpu[i]:query_start_loc_cpu[i + 1]``. It is the ``encoder_attention`` custom op's
    reference (:func:`infercore.ops.encoder_attention.encoder_attention`), which vision towers call directly.
    """
    return encoder_attention(q, k, v, query_start_loc_cpu[: num_reqs + 1], scale, out)


def encoder_only_reasons(backend: Any, encoder_only: bool) -> list[str]:
    """Why ``backend`` cannot serve a model with encoder-only layers (empty when it can or need not)."""
    if not encoder_only or getattr(backend, "supports_encoder_only", False):
        return []
    return [f"it has no encoder-only (bidirectional) attention, which this model's layers use; run on a platform "
            f"whose attention backend sets supports_encoder_only (reference, cpu, triton), not {backend.name!r}"]
