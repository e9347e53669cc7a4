"""Chained SHA-256 hashes of full KV cache blocks: the keys of the prefix cache.

The hash of block ``i`` covers the hash of block ``i - 1`` and the block's token ids, so equal
hashes mean equal prefixes. The chain starts from a root that covers the request's ``cache_salt``,
so requests with different salts (or LoRA adapters) never share a block. Tokens are encoded as 64-bit integers.
"""

from __future__ import annotations

import hashlib
from array import array

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


def hash_block(parent: BlockHash, token_ids: list[int]) -> BlockHash:
    """Hash of one full block given its parent's hash."""
    return hashlib.sha256(parent + array("q", token_ids).tobytes()).digest()


def extend_block_hashes(
    hashes: list[BlockHash], token_ids: list[int], num_blocks: int, block_size: int, cache_salt: str | None,
    lora_id: int = 0,
) -> None:
    """Append to ``hashes`` the hashes of full blocks up to ``num_blocks``; earlier ones are kept."""
    start = len(hashes)
    if start >= num_blocks:
        return
    parent = hashes[-1] if hashes else root_hash(cache_salt, lora_id)
    for i in range(start, num_blocks):
        parent = hash_block(parent, token_ids[i * block_size:(i + 1) * block_size])
        hashes.append(parent)
