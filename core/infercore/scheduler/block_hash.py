"""Chained SHA-256 hashes of full KV cache blocks: the keys of the prefix cache.

The hash of block ``i`` covers the hash of block ``i - 1`` and the block's token ids, so equal
hashes mean equal prefixes. The chain starts from a root that covers the request's ``cache_salt``,
so requests with different salts never share a block. Tokens are encoded as 64-bit integers.
"""

from __future__ import annotations

import hashlib
from array import array

BlockHash = bytes

_UNSALTED_ROOT = hashlib.sha256(b"infercore prefix cache v1").digest()


def root_hash(cache_salt: str | None) -> BlockHash:
    """The parent hash of a request's first block."""
    if cache_salt is None:
        return _UNSALTED_ROOT
    return hashlib.sha256(_UNSALTED_ROOT + b"salt:" + cache_salt.encode()).digest()


def hash_block(parent: BlockHash, token_ids: list[int]) -> BlockHash:
    """Hash of one full block given its parent's hash."""
    return hashlib.sha256(parent + array("q", token_ids).tobytes()).digest()


def extend_block_hashes(
    hashes: list[BlockHash], token_ids: list[int], num_blocks: int, block_size: int, cache_salt: str | None
) -> None:
    """Append to ``hashes`` the hashes of full blocks up to ``num_blocks``; earlier ones are kept."""
    start = len(hashes)
    if start >= num_blocks:
        return
    parent = hashes[-1] if hashes else root_hash(cache_salt)
    for i in range(start, num_blocks):
        parent = hash_block(parent, token_ids[i * block_size:(i + 1) * block_size])
        hashes.append(parent)
