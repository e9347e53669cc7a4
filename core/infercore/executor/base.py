"""The executor interface: EngineCore's handle on the workers that hold the model.

EngineCore talks only to an executor. An executor owns one :class:`~infercore.worker.worker.Worker`
per device and reaches them through :meth:`Executor.collective_rpc`; the step methods are that call
with the worker method's name, and ``execute_model(..., non_block=True)`` returns a future. Which executor runs is ``--distributed-executor-backend``; each is
registered by name through the ``register_executors`` hook and built with keyword-free positional
arguments ``(config, platform, model_info, max_num_batched_tokens)``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch

from infercore.config import InfercoreConfig
from infercore.executor.step_future import StepFuture
from infercore.wire.kv_layout import KVCacheLayout
from infercore.wire.scheduler_output import ModelRunnerOutput, SchedulerOutput


def check_model_splits(config: InfercoreConfig) -> None:
    """Raise, before any worker starts, if the model cannot be split over ``tensor_parallel_size`` ranks
    or its layers over ``pipeline_parallel_size`` stages."""
    from infercore.layers.pipeline_parallel import stage_layer_counts
    from infercore.layers.tensor_parallel import check_shardable
    from infercore.models.hf_config import get_hf_config

    hf_config = get_hf_config(config.model, config.load.download_dir)
    text_config = hf_config.get_text_config()
    check_shardable(text_config, config.parallel.tensor_parallel_size,
                    expert_parallel=config.parallel.enable_expert_parallel)
    if config.parallel.pipeline_parallel_size > 1:
        stage_layer_counts(text_config.num_hidden_layers, config.parallel.pipeline_parallel_size)


class ExecutorDeadError(RuntimeError):
    """A worker died or stopped answering: the engine cannot go on and must stop (never hang)."""


class Executor(ABC):
    """Drives one or more workers. Registered by name through ``register_executors``."""

    #: The future of the step launched last with ``non_block=True``, until its tokens come back.
    _in_flight: StepFuture | None = None
    #: Steps launched on the workers so far (each one forward pass on every rank).
    steps_launched: int = 0
    #: The rank whose step outputs count: tensor-parallel rank 0 of the last pipeline stage.
    output_rank: int = 0

    @abstractmethod
    def collective_rpc(self, method: str, args: tuple[Any, ...] = ()) -> list[Any]:
        """Call ``Worker.<method>(*args)`` on every rank; their results in rank order.

        Raises :class:`ExecutorDeadError` when a worker died or did not answer in time, and
        RuntimeError naming the rank when a worker's method raised.
        """

    def determine_num_blocks(self) -> int:
        """KV cache blocks every worker can hold: the minimum over ranks."""
        return min(self.collective_rpc("determine_num_blocks"))

    def initialize_kv_cache(self, num_blocks: int) -> KVCacheLayout:
        """Allocate the KV cache on every worker; returns its layout (rank 0's: every rank has the same
        groups and pools, of its own KV heads)."""
        return self.collective_rpc("initialize_kv_cache", (num_blocks,))[0]

    def execute_model(self, scheduler_output: SchedulerOutput, grammar_bitmask: torch.Tensor | None = None,
                      non_block: bool = False) -> ModelRunnerOutput | StepFuture:
        """Run one step on every worker; the output rank's output is returned.

        With ``non_block`` the step is launched and a :class:`StepFuture` returned at once: EngineCore
        owns the overlap, scheduling step N+1 while step N runs and waiting for step N's tokens only
        when it folds them in. Tokens of a step still in flight feed the next step on the device, so
        launches may run ahead of results by one step. Steps with a grammar bitmask run blocking (the
        bitmask needs the previous token).
        """
        self.steps_launched += 1
        if not non_block:
            return self.collective_rpc("execute_model", (scheduler_output, grammar_bitmask))[self.output_rank]
        if grammar_bitmask is not None:
            raise ValueError("a step with a grammar bitmask needs its previous tokens; run it with non_block=False")
        try:
            previous = self.execute_model_async(scheduler_output)
        except BaseException:
            self._in_flight = None  # the caller fails the steps it has not folded in
            raise
        if self._in_flight is not None:
            self._in_flight.set_result(previous)
        self._in_flight = StepFuture(self._finish_in_flight)
        return self._in_flight

    def _finish_in_flight(self) -> None:
        """Collect the step launched last and resolve its future."""
        future, self._in_flight = self._in_flight, None
        output = self.finish_pending()
        if future is not None:
            future.set_result(output)

    def submit_step(self, scheduler_output: SchedulerOutput) -> StepFuture:
        """Send one step to every worker and return at once; the future gives the output rank's output.

        Pipeline parallelism keeps several steps in the pipe this way: each worker runs the steps it is
        sent in order (each stage runs step N+1 while the next stage runs step N), and futures resolve in
        the order of their steps. This default runs the step before it returns; the ``mp`` and ``ray``
        executors send it and wait only when asked."""
        future = StepFuture(lambda: None)
        future.set_result(self.execute_model(scheduler_output))  # type: ignore[arg-type]
        return future

    def execute_model_async(self, scheduler_output: SchedulerOutput) -> ModelRunnerOutput | None:
        """Launch a step on every worker; return the output of the step launched before it (None if
        none). The primitive under ``execute_model(non_block=True)``."""
        return self.collective_rpc("execute_model_async", (scheduler_output,))[self.output_rank]

    def finish_pending(self) -> ModelRunnerOutput | None:
        """Wait for the step launched last and return its output."""
        return self.collective_rpc("finish_pending")[self.output_rank]

    def shutdown(self) -> None:  # noqa: B027 - optional hook
        """Release workers. Default: nothing."""
