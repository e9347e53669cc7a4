"""Schemathesis against every operation of the server's own /openapi.json, a bounded number of examples
each: no response is a 5xx, and the engine process that served the first request serves the last."""

from __future__ import annotations

import subprocess
import sys

import httpx

#: Examples per operation, generated from the schema (the coverage and stateful phases, whose case counts
#: this does not bound, are left out); the run stays within a couple of minutes on two cores.
MAX_EXAMPLES = 10


def test_every_route_of_the_schema_survives_fuzzing(start) -> None:
    # Short sequences and a wide batch keep the worst generated request (n=128, no max_tokens) cheap.
    server = start(None, "--max-model-len", "48", "--max-num-seqs", "128", "--num-gpu-blocks-override", "512",
                   "--max-request-body-bytes", "65536")
    engine = server.engine_pid()
    operations = httpx.get(server.url + "/openapi.json").json()["paths"]
    assert {"/v1/completions", "/v1/chat/completions", "/tokenize", "/v1/models"} <= set(operations)
    result = subprocess.run(
        [sys.executable, "-m", "schemathesis.cli", "run", server.url + "/openapi.json", "--checks",
         "not_a_server_error", "--phases", "examples,fuzzing", "--max-examples", str(MAX_EXAMPLES), "--seed", "11",
         "--request-timeout", "60", "--no-color"], capture_output=True, text=True, timeout=480)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert httpx.get(server.url + "/health").status_code == 200
    assert server.engine_pid() == engine and server.proc.poll() is None
    reply = httpx.post(server.url + "/v1/completions", json={"prompt": "hello", "max_tokens": 2}, timeout=60)
    assert reply.status_code == 200, reply.text
