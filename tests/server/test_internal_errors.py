"""Errors nobody planned for (a 500, or an error after a stream began) leak nothing: no traceback, memory
address or server path reaches the client, and the body stays bounded."""

from __future__ import annotations

import json
import re

from fastapi import FastAPI
from fastapi.testclient import TestClient

from infercore.entrypoints.openai.errors import install_error_handlers
from infercore.entrypoints.openai.serving_base import sse_error

SECRET = ("model file /srv/models/private-ckpt/weights.bin failed in /usr/lib/python3/site-packages/x.py "
          "at <object at 0x7f3a2b1c9d40>; " + "x" * 5000)


def _leaks(text: str) -> list[str]:
    found = [m for m in ("Traceback", "/srv/", "site-packages", "/usr/lib") if m in text]
    return found + re.findall(r"0x[0-9a-fA-F]{6,}", text)


def _app() -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError(SECRET)

    @app.get("/bad")
    async def bad() -> None:
        raise ValueError(SECRET)  # reaches the client only through a handler that maps it to 400

    return app


def test_an_unhandled_exception_is_a_500_that_names_only_its_type() -> None:
    response = TestClient(_app(), raise_server_exceptions=False).get("/boom")
    assert response.status_code == 500
    error = response.json()["error"]
    assert error["type"] == "InternalServerError" and "RuntimeError" in error["message"]
    assert not _leaks(response.text) and "private-ckpt" not in response.text and len(response.text) < 500


def test_an_error_after_the_stream_began_is_scrubbed_and_bounded() -> None:
    for exc in (RuntimeError(SECRET), ValueError(SECRET)):
        event = sse_error(exc)
        assert event.startswith("data: ") and event.endswith("\n\n")
        error = json.loads(event[len("data: "):])["error"]
        assert not _leaks(event), (type(exc).__name__, _leaks(event))
        assert len(error["message"]) <= 1100
    assert json.loads(sse_error(RuntimeError(SECRET))[6:])["error"]["code"] == 500
    assert json.loads(sse_error(ValueError(SECRET))[6:])["error"]["code"] == 400
