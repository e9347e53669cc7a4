"""EventStreamResponse: a server-sent-event stream that starts writing in the request's own task.

Starlette's StreamingResponse (for uvicorn's ASGI 2.3 scope) runs the stream in a task of an anyio task
group beside a task listening for the client's disconnect: setting that up, and the turn of the event
loop before the stream's task first runs, sit between a request's first token and its first write.
This response writes from the calling task and leaves the listening to one plain asyncio task
(:func:`~infercore.entrypoints.openai.disconnect.cancelled_on_disconnect`), which cancels the caller
when the client disconnects (the stream's generator then aborts its engine requests
as it unwinds); the response then ends quietly, as Starlette's does.
"""

from __future__ import annotations

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from infercore.entrypoints.openai.disconnect import cancelled_on_disconnect


class EventStreamResponse(StreamingResponse):
    """A ``text/event-stream`` StreamingResponse without the task group (see the module docstring)."""

    media_type = "text/event-stream"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def client_left() -> bool:
            try:
                while (await receive())["type"] != "http.disconnect":
                    pass
            except Exception:  # a server that cannot tell: the stream runs to its end
                return False
            return True

        async with cancelled_on_disconnect(client_left) as disconnect:
            await self.stream_response(send)
        if self.background is not None and not disconnect.gone:
            await self.background()
