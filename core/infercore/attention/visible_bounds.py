"""Per-token visibility bounds: prefill queries that see past their own position (Gemma 3's images).

Gemma 3's vision-language model lets every token of an image's placeholder span attend to the whole span
during prefill, as its HF implementation does: the causal mask ORed with "same image" on global layers,
and that, ANDed with the sliding window, on sliding layers. Such a model sets
``bidirectional_image_spans = True``; the runner then gives every step's
:class:`~infercore.attention.backend.CommonAttentionMetadata` a ``visible_until`` tensor: for each query
token, the last context position it may attend to (its own position, or the last position of the image
span it lies in). A query at position ``p`` with bound ``b`` sees positions ``t <= b`` (and
``p - t < window`` on a sliding layer). The scheduler never splits a span across steps
(:mod:`infercore.scheduler.image_spans`), so ``b`` is always inside the step's context.

A backend that honours the bounds sets :attr:`~infercore.attention.AttentionBackend.supports_visible_bounds`;
the engine refuses such a model on a backend that does not (:func:`visible_bounds_reasons`). One-token
queries never need them (a one-token query inside a span is its last token), so decode paths may ignore them.
"""

from __future__ import annotations

from typing import Any

import torch


def needs_visible_bounds(model: Any) -> bool:
    """Whether ``model`` (class or instance) lets image tokens attend to their whole span."""
    return bool(getattr(model, "bidirectional_image_spans", False))


def bounded_mask(query_len: int, seq_len: int, sliding_window: int | None, bounds: torch.Tensor,
                 device: torch.device) -> torch.Tensor:
    """[query_len, seq_len] bool: query ``j`` (at position ``seq_len - query_len + j``) may see context
    position ``t`` when ``t <= bounds[j]`` and, with a window, ``position - t < window``."""
    q_pos = torch.arange(seq_len - query_len, seq_len, device=device).unsqueeze(1)
    k_pos = torch.arange(seq_len, device=device).unsqueeze(0)
    allowed = k_pos <= torch.maximum(bounds.to(device=device, dtype=torch.int64).view(-1, 1), q_pos)
    if sliding_window is not None:
        allowed &= (q_pos - k_pos) < sliding_window
    return allowed


def visible_bounds_reasons(backend: Any, needed: bool) -> list[str]:
    """Why ``backend`` cannot serve a model whose image tokens see their whole span (empty when it can)."""
    if not needed or getattr(backend, "supports_visible_bounds", False):
        return []
    return [f"it does not honour per-token visibility bounds (CommonAttentionMetadata.visible_until), which this "
            f"model's bidirectional image spans need; use a backend that sets supports_visible_bounds "
            f"(reference, torch_paged, triton), not {backend.name!r}"]
