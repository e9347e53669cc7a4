"""The executor interface: EngineCore's handle on the workers that hold the model."""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from infercore.engine.scheduler_output import ModelRunnerOutput, SchedulerOutput


class Executor(ABC):
    """Drives one or more workers. Registered by name through ``register_executors``."""

    @abstractmethod
    def determine_num_blocks(self) -> int:
        """KV cache blocks every worker can hold."""

    @abstractmethod
    def initialize_kv_cache(self, num_blocks: int) -> None:
        """Allocate the KV cache on every worker."""

    @abstractmethod
    def execute_model(self, scheduler_output: SchedulerOutput,
                      grammar_bitmask: torch.Tensor | None = None) -> ModelRunnerOutput:
        """Run one step on every worker; the driver's output is returned."""

    @abstractmethod
    def execute_model_async(self, scheduler_output: SchedulerOutput) -> ModelRunnerOutput | None:
        """Launch a step; return the output of the step launched before it (None if none)."""

    @abstractmethod
    def finish_pending(self) -> ModelRunnerOutput | None:
        """Wait for the step launched last by ``execute_model_async``; return its output."""

    def shutdown(self) -> None:  # noqa: B027 - optional hook
        """Release workers. Default: nothing."""
