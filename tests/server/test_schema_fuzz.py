"""Schemathesis against the server's own /openapi.json: no 5xx on the inference and tokenize routes."""

from __future__ import annotations

import shutil
import subprocess

import httpx
import pytest

ROUTES = r"^/(v1/completions|v1/chat/completions|tokenize|detokenize)$"


@pytest.mark.skipif(shutil.which("schemathesis") is None, reason="schemathesis is not installed")
def test_schemathesis_finds_no_server_errors(start_server) -> None:
    # Short sequences and a wide batch keep the worst generated request (n=128, no max_tokens) cheap.
    server = start_server("--max-model-len", "48", "--max-num-seqs", "128", "--num-gpu-blocks-override", "512",
                          "--max-request-body-bytes", "65536")
    result = subprocess.run(
        ["schemathesis", "run", server.url + "/openapi.json", "--checks", "not_a_server_error",
         "--include-path-regex", ROUTES, "--max-examples", "20", "--seed", "7", "--request-timeout", "30",
         "--no-color"], capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout[-4000:]
    assert httpx.get(server.url + "/health").status_code == 200
    completion = httpx.post(server.url + "/v1/completions", json={"prompt": "hello", "max_tokens": 2})
    assert completion.status_code == 200
