"""Cancelling the request's own task when its client goes away.

The work of a request (validating it, sending it to the engine, streaming its outputs) runs in the
request's own task, never a task of its own: that saves the turns of the event loop a task hand-off
costs before the first output goes out. A watcher task beside it cancels that task when the client
has gone; :func:`cancelled_on_disconnect` answers that one cancellation and lets any other through.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable


class Disconnect:
    """Whether the client went away (and so the caller's work was cancelled)."""

    gone = False


@contextlib.asynccontextmanager
async def cancelled_on_disconnect(disconnected: Callable[[], Awaitable[bool]]) -> AsyncIterator[Disconnect]:
    """Run the block in the calling task while ``disconnected()`` (awaited once, in a watcher task)
    waits for the client to go; when it returns True the calling task is cancelled, the block ends and
    ``gone`` is set. Any other cancellation goes through unchanged."""
    caller = asyncio.current_task()
    if caller is None:
        raise RuntimeError("cancelled_on_disconnect must be entered in a task")
    state = Disconnect()

    async def watch() -> None:
        if await disconnected():
            state.gone = True
            caller.cancel()

    watcher = asyncio.ensure_future(watch())
    try:
        yield state
    except asyncio.CancelledError:
        if not state.gone:
            raise
        if hasattr(caller, "uncancel"):  # Python 3.11+: this cancellation is answered here
            caller.uncancel()
    finally:
        watcher.cancel()
