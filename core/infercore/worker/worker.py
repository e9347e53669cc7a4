"""The worker: one device's share of the engine — its process-group rank, model shard, KV cache and runner.

The same class runs under every executor: in EngineCore's own process (``uni``), in a process per
rank (``mp``) and in a Ray actor per rank (``ray``). Its public methods are what an executor may
call through ``collective_rpc``; their type hints are the RPC wire's types.
"""

from __future__ import annotations

import logging
import os

import torch

from infercore.config import InfercoreConfig
from infercore.distributed.dp_rendezvous import spans_data_parallel
from infercore.distributed.expert_group import destroy_expert_parallel_group, init_expert_parallel_group
from infercore.distributed.process_group import destroy_tensor_parallel, init_parallel
from infercore.platforms.interface import Platform
from infercore.wire.kv_layout import KVCacheLayout
from infercore.wire.model_info import ModelInfo
from infercore.wire.scheduler_output import ModelRunnerOutput, SchedulerOutput
from infercore.worker.dummy_step import run_dummy_step
from infercore.worker.stage_trace import StageTrace

logger = logging.getLogger(__name__)

#: Methods an executor may call on a worker over RPC.
RPC_METHODS = frozenset({"determine_num_blocks", "initialize_kv_cache", "execute_model",
                         "execute_model_async", "finish_pending", "execute_dummy_batch", "get_pid", "ping"})


def output_rank(config: InfercoreConfig) -> int:
    """The rank whose step outputs the engine reads: tensor-parallel rank 0 of the last pipeline stage."""
    par = config.parallel
    return (par.pipeline_parallel_size - 1) * par.tensor_parallel_size


def platform_for(config: InfercoreConfig) -> Platform:
    """The platform this process runs on, with the plugins configured (in a fresh worker process)."""
    from infercore.platforms.selection import current_platform
    from infercore.plugins.manager import get_plugin_manager
    from infercore.pooling.config import configure_pooling

    manager = get_plugin_manager()
    manager.configure(config)
    configure_pooling(config)
    platform = current_platform(manager)
    platform.update_config(config)
    return platform


class Worker:
    """Initialises its device and process group, loads its shard, sizes and allocates its KV cache
    and runs steps. Only the output rank (rank 0 of the last pipeline stage: :func:`output_rank`) returns
    sampled tokens; every rank of that stage samples (the same tokens) to keep its own copy of each
    request's tokens for the next step, and the other stages get them with the next step."""

    def __init__(self, config: InfercoreConfig, model_info: ModelInfo, max_num_batched_tokens: int, *,
                 rank: int = 0, world_size: int = 1, device_index: int = 0, init_method: str = "",
                 platform: Platform | None = None) -> None:
        from infercore.worker.model_runner import ModelRunner

        self.rank = rank
        self.world_size = world_size
        self.platform = platform or platform_for(config)
        self.platform.set_device(device_index)
        self.device = self.platform.device(device_index)
        stages = config.parallel.pipeline_parallel_size if world_size > 1 else 1
        init_parallel(rank, world_size // stages, stages, self.platform.dist_backend, init_method, self.device)
        #: The rank that returns step outputs: tensor-parallel rank 0 of the last stage.
        self.output_rank = (stages - 1) * (world_size // stages)
        init_expert_parallel_group(config.parallel, rank, self.platform.dist_backend, self.device)
        #: Whether every step must run a forward pass (experts spread over data-parallel engines).
        self.lockstep = spans_data_parallel(config.parallel)
        self.runner = ModelRunner(config, self.platform, self.device, model_info.max_model_len,
                                  max_num_batched_tokens, model_info.eos_token_id)
        self.trace = StageTrace(rank)
        logger.info("worker %d/%d ready on %s", rank, world_size, self.device)

    def _driver_only(self, output: ModelRunnerOutput | None) -> ModelRunnerOutput | None:
        return output if self.rank == self.output_rank else None

    def determine_num_blocks(self) -> int:
        """KV cache blocks that fit this device (the executor takes the minimum over ranks)."""
        return self.runner.determine_num_blocks()

    def initialize_kv_cache(self, num_blocks: int) -> KVCacheLayout:
        """Allocate ``num_blocks`` primary-group blocks of this rank's KV heads, finish start-up (warm-up,
        graphs) and return the cache's layout for EngineCore."""
        return self.runner.initialize_kv_cache(num_blocks)

    def execute_model(self, scheduler_output: SchedulerOutput,
                      grammar_bitmask: torch.Tensor | None = None) -> ModelRunnerOutput | None:
        """Run one step and wait for its tokens (the output rank returns them). In lockstep with other
        data-parallel engines, a step with nothing scheduled runs the dummy forward pass."""
        if self.lockstep and not scheduler_output.req_ids:
            self.execute_dummy_batch()
        self.trace.begin()
        output = self.runner.execute_model(scheduler_output, grammar_bitmask)
        self.trace.end(scheduler_output)
        return self._driver_only(output)

    def execute_dummy_batch(self) -> None:
        """One forward pass of a throw-away token: this engine's share of a step the other
        data-parallel engines run (their MoE layers exchange tokens with this engine's experts)."""
        run_dummy_step(self.runner)

    def execute_model_async(self, scheduler_output: SchedulerOutput) -> ModelRunnerOutput | None:
        """Launch a step; rank 0 returns the output of the step launched before it."""
        return self._driver_only(self.runner.execute_model_async(scheduler_output))

    def finish_pending(self) -> ModelRunnerOutput | None:
        """Wait for the last launched step; rank 0 returns its output."""
        return self._driver_only(self.runner.finish_pending())

    def get_pid(self) -> int:
        """This worker's process id (for supervision and fault tests)."""
        return os.getpid()

    def ping(self) -> int:
        """Liveness probe: returns the rank."""
        return self.rank

    def shutdown(self) -> None:
        """Leave the process groups."""
        destroy_expert_parallel_group()
        destroy_tensor_parallel()
