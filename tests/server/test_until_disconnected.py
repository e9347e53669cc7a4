"""until_disconnected runs the work in the caller's task (no turn of the event loop before a ready result)
and still answers a client that went away with a 499, cancelling the work."""

from __future__ import annotations

import asyncio

import pytest

from infercore.entrypoints.openai import serving_base
from infercore.entrypoints.openai.errors import APIError
from infercore.entrypoints.openai.serving_base import until_disconnected


class FakeRequest:
    """A request whose client leaves after ``connected_polls`` polls (never, if None)."""

    def __init__(self, connected_polls: int | None) -> None:
        self.connected_polls = connected_polls
        self.polls = 0

    async def is_disconnected(self) -> bool:
        self.polls += 1
        return self.connected_polls is not None and self.polls > self.connected_polls


def test_ready_work_costs_no_turn_of_the_loop() -> None:
    async def main() -> tuple[int, bool]:
        turned = asyncio.Event()
        asyncio.get_running_loop().call_soon(turned.set)

        async def ready() -> int:
            return 7

        result = await until_disconnected(FakeRequest(None), ready())
        return result, turned.is_set()

    assert asyncio.run(main()) == (7, False)


def test_work_errors_pass_through() -> None:
    async def failing() -> None:
        raise ValueError("bad prompt")

    with pytest.raises(ValueError, match="bad prompt"):
        asyncio.run(until_disconnected(FakeRequest(None), failing()))


def test_gone_client_gets_499_and_the_work_is_cancelled(monkeypatch) -> None:
    monkeypatch.setattr(serving_base, "DISCONNECT_POLL_S", 0.01)
    cancelled = []

    async def endless() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def main() -> int:
        with pytest.raises(APIError) as info:
            await until_disconnected(FakeRequest(connected_polls=2), endless())
        task = asyncio.current_task()
        assert task is not None and (not hasattr(task, "cancelling") or task.cancelling() == 0)
        await asyncio.sleep(0)  # the caller goes on normally after the 499
        return info.value.status

    assert asyncio.run(asyncio.wait_for(main(), 5)) == 499
    assert cancelled == [True]


def test_outer_cancellation_is_not_a_disconnect() -> None:
    async def main() -> None:
        task = asyncio.ensure_future(until_disconnected(FakeRequest(None), asyncio.sleep(30)))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
