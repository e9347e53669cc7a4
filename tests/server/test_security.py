"""--api-key guards every route but /health and /version; path and Host tricks don't get around it."""

from __future__ import annotations

import socket

import httpx
import openai
import pytest

KEY = "s3cret-key"


@pytest.fixture(scope="module")
def keyed(start_server):
    return start_server("--api-key", KEY)


@pytest.fixture(scope="module")
def env_keyed(start_server):
    return start_server(env={"INFERCORE_API_KEY": "from-env"})


GUARDED = [("GET", "/v1/models"), ("POST", "/v1/completions"), ("POST", "/v1/chat/completions"),
           ("POST", "/tokenize"), ("POST", "/detokenize"), ("GET", "/metrics"), ("GET", "/openapi.json"),
           ("GET", "/docs"), ("GET", "/debug/kv_cache"), ("GET", "//v1/models"), ("GET", "/v1/models/"),
           ("GET", "/V1/models"), ("GET", "/v1/./models"), ("GET", "/health/../v1/models"), ("GET", "/health/"),
           ("GET", "/nonexistent"),
           # Routes of other servers (LoRA updates, pooling models): refused before routing, whatever is served.
           ("POST", "/v1/load_lora_adapter"), ("POST", "/v1/unload_lora_adapter"), ("POST", "/v1/embeddings"),
           ("POST", "/v1/score"), ("POST", "/score"), ("POST", "/v1/rerank"), ("POST", "/rerank"), ("POST", "/pooling")]


def _raw(server, method: str, path: str, headers: dict[str, str] | None = None) -> int:
    """Send ``path`` exactly as written (no client-side normalization); returns the status code."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {(headers or {}).pop('Host', '127.0.0.1')}",
             "Content-Length: 2", "Content-Type: application/json", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n{}").encode())
        status_line = sock.makefile("rb").readline().decode()
    return int(status_line.split()[1])


@pytest.mark.parametrize(("method", "path"), GUARDED)
def test_every_route_needs_the_key(keyed, method, path) -> None:
    assert _raw(keyed, method, path) == 401
    assert _raw(keyed, method, path, {"Authorization": "Bearer wrong"}) == 401
    assert _raw(keyed, method, path, {"Host": "localhost", "X-Forwarded-For": "127.0.0.1"}) == 401


def test_a_preflight_without_the_key_reaches_no_route(keyed) -> None:
    """OPTIONS passes the key check for CORS preflights; without --allowed-origins nothing answers it with data."""
    response = httpx.options(keyed.url + "/v1/models")
    assert response.status_code in (400, 405) and "data" not in response.text


def test_open_routes_and_the_right_key(keyed) -> None:
    assert httpx.get(keyed.url + "/health").status_code == 200
    assert httpx.get(keyed.url + "/version").status_code == 200
    client = openai.OpenAI(base_url=keyed.url + "/v1", api_key=KEY, max_retries=0)
    assert client.models.list().data
    assert client.completions.create(model=client.models.list().data[0].id, prompt="hi", max_tokens=2).choices
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=keyed.url + "/v1", api_key="nope", max_retries=0).models.list()
    response = httpx.get(keyed.url + "/v1/models")
    assert response.json()["error"]["code"] == 401 and KEY not in response.text


def test_key_from_environment(env_keyed) -> None:
    assert httpx.get(env_keyed.url + "/v1/models").status_code == 401
    assert httpx.get(env_keyed.url + "/v1/models", headers={"Authorization": "Bearer from-env"}).status_code == 200
