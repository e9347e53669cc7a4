"""ASGI guards in front of every route: API key, body size, draining; they answer before any parsing."""

from __future__ import annotations

import hmac
import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from infercore.engine.latency_trace import SCOPE_KEY, now_ns, request_stamps
from infercore.entrypoints.openai.errors import error_body
from infercore.entrypoints.openai.state import DrainState

#: Routes that answer without the API key (exact paths; everything else needs it).
OPEN_PATHS = frozenset({"/health", "/version"})


async def send_error(send: Send, status: int, message: str, headers: dict[str, str] | None = None) -> None:
    body = json.dumps(error_body(status, message)).encode()
    raw_headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw_headers += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": body})


class GuardMiddleware:
    """API key check (deny by default, constant-time), drain refusal, body-size bound, in-flight count.

    ``drain.draining`` is read per request; ``drain.in_flight`` counts the HTTP requests being served so
    a drain can wait for them. With ``trace_latency`` each request's task carries its latency-trace
    stamps (``latency_trace.request_stamps``): the protocol's, the app's start and the body's end.
    """

    def __init__(self, app: ASGIApp, api_key: str | None, max_body_bytes: int, drain: DrainState,
                 trace_latency: bool = False) -> None:
        self.app = app
        self.trace_latency = trace_latency
        self.api_key = api_key.encode() if api_key else None
        self.max_body_bytes = max_body_bytes
        self.drain = drain

    def _authorized(self, scope: Scope) -> bool:
        if self.api_key is None or scope.get("path") in OPEN_PATHS:
            return True
        for name, value in scope.get("headers", []):
            if name == b"authorization":
                scheme, _, token = value.partition(b" ")
                if scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self.api_key):
                    return True
        return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        stamps = {**scope.get(SCOPE_KEY, {}), "app_start": now_ns()} if self.trace_latency else None
        if scope.get("method") == "OPTIONS" and self.api_key is not None:
            # CORS preflights carry no credentials; the CORS layer inside answers them.
            await self.app(scope, receive, send)
            return
        if not self._authorized(scope):
            await send_error(send, 401, "missing or wrong API key; send it as 'Authorization: Bearer KEY'",
                             {"WWW-Authenticate": "Bearer"})
            return
        if self.drain.draining:
            await send_error(send, 503, "the server is shutting down and takes no new requests",
                             {"Retry-After": "1"})
            return
        buffered = await self._read_body(scope, receive, send)
        if buffered is None:
            return
        if stamps is not None:
            stamps["body_read"] = now_ns()
            request_stamps.set(stamps)
        self.drain.in_flight += 1
        try:
            await self.app(scope, buffered, send)
        finally:
            self.drain.in_flight -= 1

    async def _read_body(self, scope: Scope, receive: Receive, send: Send) -> Receive | None:
        """Read the whole body up to the limit and return a receive that replays it; None after a 413."""
        too_large = f"the request body is larger than the server's limit of {self.max_body_bytes} bytes"
        for name, value in scope.get("headers", []):
            if name == b"content-length" and value.isdigit() and int(value) > self.max_body_bytes:
                await send_error(send, 413, too_large)
                return None
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return _replay(b"", message, receive)
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                await send_error(send, 413, too_large)
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return _replay(b"".join(chunks), None, receive)


def _replay(body: bytes, pending: Message | None, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return pending or {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
