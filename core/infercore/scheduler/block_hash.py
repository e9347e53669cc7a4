"""Chained SHA-256 hashes of full KV cache blocks: the keys of the prefix cache.

The hash of block ``i`` covers the hash of block ``i - 1`` and the block's token ids, so equal
hashes mean equal prefixes. The chain starts from a root that covers the request's ``cache_salt``,
so requests with different salts (or LoRA adapters) never share a block. Tokens are encoded as 64-bit integers.
A block that holds placeholder tokens of an image also covers the image's content hash: two prompts with the
same text and different images never share the image's blocks or any after them.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from infercore.wire.multimodal import MultiModalFeature

BlockHash = bytes

_UNSALTED_ROOT = hashlib.sha256(b"infercore prefix cache v1").digest()


def root_hash(cache_salt: str | None, lora_id: int = 0) -> BlockHash:
    """The parent hash of a request's first block: it covers the salt and the LoRA adapter (KV computed
    through one adapter is never another's, nor the base model's)."""
    root = _UNSALTED_ROOT
    if cache_salt is not None:
        root = hashlib.sha256(root + b"salt:" + cache_salt.encode()).digest()
    if lora_id:
        root = hashlib.sha256(root + b"lora:" + str(lora_id).encode()).digest()
    return root


def hash_block(parent: BlockHash, token_ids: list[int], extra: bytes = b"") -> BlockHash:
    """Hash of one full block given its parent's hash; ``extra`` covers what the tokens do not say
    (the content hashes of the images whose placeholders the block holds)."""
    return hashlib.sha256(parent + array("q", token_ids).tobytes() + extra).digest()


def media_keys(features: Sequence[MultiModalFeature], start: int, stop: int) -> bytes:
    """The identifiers of the media items whose placeholders meet tokens ``start .. stop - 1``."""
    return b"".join(b"mm:" + f.identifier.encode() for f in features if f.offset < stop and f.end > start)


def extend_block_hashes(
    hashes: list[BlockHash], token_ids: list[int], num_blocks: int, block_size: int, cache_salt: str | None,
    lora_id: int = 0, mm_features: Sequence[MultiModalFeature] | None = None,
) -> None:
    """Append to ``hashes`` the hashes of full blocks up to ``num_blocks``; earlier ones are kept.
    ``mm_features`` are the prompt's images (their hashes join the blocks their placeholders fill)."""
    start = len(hashes)
    if start >= num_blocks:
        return
    parent = hashes[-1] if hashes else root_hash(cache_salt, lora_id)
    for i in range(start, num_blocks):
        lo, hi = i * block_size, (i + 1) * block_size
        extra = media_keys(mm_features, lo, hi) if mm_features else b""
        parent = hash_block(parent, token_ids[lo:hi], extra)
        hashes.append(parent)
