"""Attention: the backend interface plugins implement and the generic layer models use."""

from infercore.attention.backend import (
    AttentionBackend,
    AttentionImpl,
    AttentionMetadataBuilder,
    AttentionRequest,
    CommonAttentionMetadata,
)
from infercore.attention.layer import Attention

__all__ = [
    "Attention",
    "AttentionBackend",
    "AttentionImpl",
    "AttentionMetadataBuilder",
    "AttentionRequest",
    "CommonAttentionMetadata",
]
