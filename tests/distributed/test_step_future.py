"""``Executor.execute_model(non_block=True)``: a future per step, resolved by the next launch or on demand."""

from __future__ import annotations

from typing import Any

import pytest

from infercore.executor.base import Executor
from infercore.wire.scheduler_output import CachedRequests, ModelRunnerOutput, SchedulerOutput


class ScriptedExecutor(Executor):
    """Workers that answer a launch with the previous launch's output, like the model runner."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.launched: list[int] = []

    def collective_rpc(self, method: str, args: tuple[Any, ...] = ()) -> list[Any]:
        self.calls.append(method)
        if method == "execute_model_async":
            previous = self._output(self.launched[-1]) if self.launched else None
            self.launched.append(args[0].total_num_scheduled_tokens)
            return [previous]
        if method == "finish_pending":
            return [self._output(self.launched.pop())]
        raise AssertionError(method)

    @staticmethod
    def _output(step: int) -> ModelRunnerOutput:
        return ModelRunnerOutput(req_ids=[str(step)], sampled_token_ids=[[step]])


def _step(n: int) -> SchedulerOutput:
    return SchedulerOutput([], CachedRequests(), [], n, set())


def test_next_launch_resolves_the_previous_future() -> None:
    executor = ScriptedExecutor()
    first = executor.execute_model(_step(1), non_block=True)
    assert not first.done()
    second = executor.execute_model(_step(2), non_block=True)
    assert first.done() and first.result().sampled_token_ids == [[1]]
    assert executor.calls == ["execute_model_async", "execute_model_async"]
    assert second.result().sampled_token_ids == [[2]]  # waits: the workers are asked for it
    assert executor.calls[-1] == "finish_pending"


def test_a_bitmask_step_cannot_be_launched_ahead() -> None:
    import torch

    with pytest.raises(ValueError, match="grammar bitmask"):
        ScriptedExecutor().execute_model(_step(1), torch.zeros(1, 1, dtype=torch.int32), non_block=True)
