"""Pooling methods as vLLM names them: LAST, CLS, MEAN, ALL, STEP — one request's hidden states to its result."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


class PoolingType(str, enum.Enum):
    """How a request's hidden states [L, H] become its pooled result."""

    LAST = "LAST"
    CLS = "CLS"
    MEAN = "MEAN"
    ALL = "ALL"
    STEP = "STEP"

    @classmethod
    def parse(cls, name: str) -> PoolingType:
        try:
            return cls(name.upper())
        except ValueError:
            raise ValueError(f"pooling_type must be one of {', '.join(m.value for m in cls)}, got {name!r}") from None

    @property
    def needs_every_token(self) -> bool:
        """Whether the method reads more than the last token's hidden state (so a prefix-cache hit, whose
        tokens are never computed, would lose some)."""
        return self is not PoolingType.LAST


def pool_hidden(method: PoolingType, hidden: torch.Tensor, token_ids: list[int] | None = None,
                step_tag_id: int | None = None, returned_token_ids: list[int] | None = None) -> torch.Tensor:
    """One request's pooled result from its hidden states ``hidden`` [L, H] (every prompt position).

    LAST: the last position [H]; CLS: the first [H]; MEAN: the mean over positions [H]; ALL: every
    position [L, H]; STEP: the positions whose token is ``step_tag_id`` (all when None), with the
    features narrowed to ``returned_token_ids`` when given (a process-reward model's label columns).
    """
    if method is PoolingType.LAST:
        return hidden[-1]
    if method is PoolingType.CLS:
        return hidden[0]
    if method is PoolingType.MEAN:
        return hidden.float().mean(dim=0).to(hidden.dtype)
    if method is PoolingType.ALL:
        return hidden
    rows = hidden
    if returned_token_ids:
        rows = rows[:, returned_token_ids]
    if step_tag_id is not None and token_ids is not None:
        import torch  # here, not at the top: the API server imports this module for PoolingType alone

        mask = torch.tensor([t == step_tag_id for t in token_ids[: hidden.shape[0]]], device=hidden.device)
        rows = rows[mask]
    return rows
