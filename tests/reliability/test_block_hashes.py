"""Prefix-cache keys are SHA-256 chains over (parent hash, token ids, salt), never Python's ``hash()``,
and a request's ``cache_salt`` keeps its blocks away from every other tenant, end to end."""

from __future__ import annotations

import ast
import hashlib
import inspect
import json
import os
import re
import struct
import subprocess
import sys

import httpx
import pytest

from infercore.scheduler import block_hash, block_pool, kv_cache_manager, request, scheduler
from infercore.scheduler.block_hash import extend_block_hashes, hash_block, root_hash

PREFIX_CODE = [block_hash, block_pool, kv_cache_manager, request, scheduler]
CHAIN_SCRIPT = """
import json, sys
from infercore.scheduler.block_hash import extend_block_hashes
hashes = []
extend_block_hashes(hashes, list(range(40)), 5, 8, sys.argv[1])
print(json.dumps([h.hex() for h in hashes]))
"""


def test_block_hash_is_sha256_of_the_parent_and_the_token_ids() -> None:
    tokens = [0, 1, 2**31 - 1, 151935]
    for parent in (root_hash(None), root_hash("tenant-a")):
        expected = hashlib.sha256(parent + struct.pack(f"={len(tokens)}q", *tokens)).digest()
        assert hash_block(parent, tokens) == expected
        assert len(parent) == 32


def test_chain_links_every_block_to_its_whole_prefix_and_salt() -> None:
    def chain(tokens: list[int], salt: str | None) -> list[bytes]:
        hashes: list[bytes] = []
        extend_block_hashes(hashes, tokens, len(tokens) // 4, 4, salt)
        return hashes

    base = chain(list(range(12)), None)
    changed_first = chain([99, *range(1, 12)], None)
    assert base[0] != changed_first[0] and base[2] != changed_first[2]  # same last block, other prefix
    assert chain(list(range(12)), None) == base
    salted = [chain(list(range(12)), salt) for salt in ("a", "b", "ab")]
    assert len({h for hashes in salted for h in hashes} | set(base)) == 4 * 3


def test_hashes_are_the_same_in_every_process() -> None:
    # Python's hash() of a str changes with PYTHONHASHSEED; SHA-256 keys must not.
    runs = [subprocess.run([sys.executable, "-c", CHAIN_SCRIPT, "tenant"], capture_output=True, text=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}, check=True).stdout for seed in ("1", "2")]
    assert runs[0] == runs[1]
    assert json.loads(runs[0])[0] == hash_block(root_hash("tenant"), list(range(8))).hex()


@pytest.mark.parametrize("module", PREFIX_CODE, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_prefix_cache_code_never_calls_python_hash(module) -> None:
    tree = ast.parse(inspect.getsource(module))
    calls = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call)
             and ((isinstance(node.func, ast.Name) and node.func.id == "hash")
                  or (isinstance(node.func, ast.Attribute) and node.func.attr == "__hash__"))]
    assert not calls, f"{module.__name__} calls hash() on lines {calls}"


def _prefix_hits(url: str) -> float:
    metrics = httpx.get(url + "/metrics").text
    match = re.search(r"^infercore:prefix_cache_hits_total\{[^}]*\} (\S+)$", metrics, re.MULTILINE)
    assert match, "no prefix_cache_hits in /metrics"
    return float(match.group(1))


def test_cache_salt_isolates_tenants_through_the_server(start) -> None:
    server = start(None)
    prompt = " ".join(f"word{i}" for i in range(80))  # several full blocks

    def hits_of(salt: str | None) -> float:
        before = _prefix_hits(server.url)
        body = {"prompt": prompt, "max_tokens": 1, **({"cache_salt": salt} if salt else {})}
        assert httpx.post(server.url + "/v1/completions", json=body, timeout=60).status_code == 200
        return _prefix_hits(server.url) - before

    assert hits_of("alice") == 0
    assert hits_of("bob") == 0
    assert hits_of(None) == 0
    assert hits_of("alice") > 0  # the same tenant does reuse its own blocks
    assert hits_of(None) > 0
