"""The in-process executor: one worker, in EngineCore's own process, called directly."""

from __future__ import annotations

from typing import Any

from infercore.config import InfercoreConfig
from infercore.executor.base import Executor
from infercore.platforms.interface import Platform
from infercore.wire.model_info import ModelInfo
from infercore.worker.worker import Worker


class UniProcExecutor(Executor):
    """One device, no processes and no serialisation: ``collective_rpc`` is a method call."""

    def __init__(self, config: InfercoreConfig, platform: Platform, model_info: ModelInfo,
                 max_num_batched_tokens: int) -> None:
        device_index = config.parallel.data_parallel_rank if platform.device_type != "cpu" else 0
        self.worker = Worker(config, model_info, max_num_batched_tokens, device_index=device_index,
                             platform=platform)

    @property
    def runner(self) -> Any:
        """The worker's model runner (tests and benchmarks look inside it)."""
        return self.worker.runner

    def collective_rpc(self, method: str, args: tuple[Any, ...] = ()) -> list[Any]:
        return [getattr(self.worker, method)(*args)]
