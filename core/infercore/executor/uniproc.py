"""The in-process executor: one worker, in EngineCore's own process."""

from __future__ import annotations

import torch

from infercore.config import InfercoreConfig
from infercore.engine.model_info import ModelInfo
from infercore.engine.scheduler_output import ModelRunnerOutput, SchedulerOutput
from infercore.executor.base import Executor
from infercore.platforms.interface import Platform
from infercore.worker.model_runner import ModelRunner


class UniProcExecutor(Executor):
    """Runs the model runner directly: no processes, no RPC."""

    def __init__(self, config: InfercoreConfig, platform: Platform, model_info: ModelInfo,
                 max_num_batched_tokens: int) -> None:
        platform.set_device(0)
        self.runner = ModelRunner(config, platform, platform.device(0), model_info.max_model_len,
                                  max_num_batched_tokens, model_info.eos_token_id)

    def determine_num_blocks(self) -> int:
        return self.runner.determine_num_blocks()

    def initialize_kv_cache(self, num_blocks: int) -> None:
        self.runner.initialize_kv_cache(num_blocks)

    def execute_model(self, scheduler_output: SchedulerOutput,
                      grammar_bitmask: torch.Tensor | None = None) -> ModelRunnerOutput:
        return self.runner.execute_model(scheduler_output, grammar_bitmask)

    def execute_model_async(self, scheduler_output: SchedulerOutput) -> ModelRunnerOutput | None:
        return self.runner.execute_model_async(scheduler_output)

    def finish_pending(self) -> ModelRunnerOutput | None:
        return self.runner.finish_pending()
