"""EventStreamResponse writes its first event from the calling task (no turn of the event loop before
it), and a client that disconnects cancels the stream, whose cleanup runs, and ends the response quietly."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from infercore.entrypoints.openai.event_stream import EventStreamResponse

SCOPE = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1"}


async def _never_disconnects() -> dict:
    await asyncio.sleep(30)
    return {"type": "http.disconnect"}


def test_first_event_is_written_without_a_turn_of_the_loop() -> None:
    async def events() -> AsyncIterator[bytes]:
        yield b"data: 1\n\n"
        yield b"data: [DONE]\n\n"

    async def main() -> tuple[list[bytes], bool]:
        turned = asyncio.Event()
        asyncio.get_running_loop().call_soon(turned.set)
        bodies: list[bytes] = []
        turned_at_first_event: list[bool] = []

        async def send(message: dict) -> None:
            if message["type"] == "http.response.body":
                if not bodies:
                    turned_at_first_event.append(turned.is_set())
                bodies.append(message["body"])

        await EventStreamResponse(events())(SCOPE, _never_disconnects, send)
        return bodies, turned_at_first_event[0]

    bodies, turned = asyncio.run(main())
    assert bodies == [b"data: 1\n\n", b"data: [DONE]\n\n", b""]
    assert not turned


def test_disconnect_cancels_the_stream_and_ends_quietly() -> None:
    cleaned_up = []

    async def endless() -> AsyncIterator[bytes]:
        try:
            while True:
                yield b"data: x\n\n"
                await asyncio.sleep(0.01)
        finally:
            cleaned_up.append(True)

    async def main() -> int:
        sent = []

        async def send(message: dict) -> None:
            sent.append(message)

        async def receive() -> dict:
            await asyncio.sleep(0.05)
            return {"type": "http.disconnect"}

        await EventStreamResponse(endless())(SCOPE, receive, send)
        task = asyncio.current_task()
        assert task is not None and (not hasattr(task, "cancelling") or task.cancelling() == 0)
        return len(sent)

    assert asyncio.run(asyncio.wait_for(main(), 5)) >= 2
    assert cleaned_up == [True]
