"""The ``ray`` executor: one worker per device as a Ray actor in a placement group.

The workers can then span the hosts of a Ray cluster (``RAY_ADDRESS``, or the cluster this process
already joined; without either, a local one is started): one placement-group bundle per worker, rank
``pp_rank * tp + tp_rank``; with ``pipeline_stage_placement="spread"`` every pipeline stage's bundles
are pinned to a node of its own (by the node-id label Ray gives each node), so stages meet over the
network and tensor-parallel ranks stay on one host. Calls are the same msgspec bytes the ``mp``
executor broadcasts; Ray only carries them, and an actor runs its calls in the order they were sent,
which is what lets several pipelined steps be in flight. Ray is an optional extra:
``pip install infercore[ray]``.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import msgspec

from infercore.config import InfercoreConfig
from infercore.distributed.process_group import free_port
from infercore.distributed.rpc_codec import (
    decode_call,
    decode_reply,
    decode_value,
    dispatch,
    encode_call,
    encode_reply,
)
from infercore.executor.base import Executor, ExecutorDeadError, check_model_splits
from infercore.executor.step_future import StepFuture
from infercore.executor.worker_proc import WorkerLaunch
from infercore.platforms.interface import Platform
from infercore.wire.model_info import ModelInfo
from infercore.wire.scheduler_output import SchedulerOutput
from infercore.worker.worker import Worker, output_rank

logger = logging.getLogger(__name__)

#: After a worker reports an error, how long to wait for every actor to answer a ping (a dead one's fails).
PEER_DEATH_GRACE_S = 1.0

STARTUP_TIMEOUT_S = 600.0


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ImportError("the ray executor needs Ray: pip install 'infercore[ray]' (or choose "
                          "--distributed-executor-backend mp)") from None
    return ray


#: The label Ray puts on every node: its node id.
NODE_ID_LABEL = "ray.io/node-id"


def stage_nodes(ray: Any, num_stages: int, workers_per_stage: int, bundle: dict[str, float]) -> list[str]:
    """A distinct alive node for each pipeline stage, each with room for ``workers_per_stage`` bundles;
    the node this process runs on first when it has room."""
    here = ray.get_runtime_context().get_node_id()
    fits = [node["NodeID"] for node in ray.nodes() if node.get("Alive") and all(
        node.get("Resources", {}).get(key, 0) >= amount * workers_per_stage for key, amount in bundle.items())]
    fits.sort(key=lambda node_id: node_id != here)
    if len(fits) < num_stages:
        raise RuntimeError(f"pipeline_stage_placement='spread' needs {num_stages} Ray nodes with room for "
                           f"{workers_per_stage} workers of {bundle} each, but the cluster has {len(fits)}; add "
                           "nodes (ray start --address=...) or use pipeline_stage_placement='pack'")
    return fits[:num_stages]


class RayWorkerActor:
    """Holds one :class:`Worker` inside a Ray actor; calls and replies are msgspec bytes."""

    def __init__(self) -> None:
        self.worker: Worker | None = None
        self.rank = -1

    def node_ip(self) -> str:
        """The address peers reach this actor's node on."""
        import ray

        return str(ray.util.get_node_ip_address())

    def node_id(self) -> str:
        """The Ray node this actor runs on."""
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def free_port(self) -> int:
        """A port free on this actor's node (for the process group's rendezvous)."""
        return free_port("0.0.0.0")

    def start(self, launch_bytes: bytes) -> bytes:
        """Build the worker; reply with its pid or the reason it could not start."""
        launch = msgspec.msgpack.decode(launch_bytes, type=WorkerLaunch)
        self.rank = launch.rank
        try:
            config = InfercoreConfig.model_validate_json(launch.config_json)
            self.worker = Worker(config, launch.model_info, launch.max_num_batched_tokens, rank=launch.rank,
                                 world_size=launch.world_size, device_index=launch.device_index,
                                 init_method=launch.init_method)
        except Exception as exc:
            logger.exception("worker %d failed to start", launch.rank)
            return encode_reply(launch.rank, error=f"{type(exc).__name__}: {exc}")
        return encode_reply(launch.rank, os.getpid())

    def call(self, data: bytes) -> bytes:
        """Run one call on the worker."""
        from infercore.worker.worker import RPC_METHODS

        try:
            return encode_reply(self.rank, dispatch(self.worker, RPC_METHODS.__contains__, decode_call(data)))
        except Exception as exc:
            logger.exception("worker %d failed", self.rank)
            return encode_reply(self.rank, error=f"{type(exc).__name__}: {exc}")


class RayExecutor(Executor):
    """Places ``tensor_parallel_size * pipeline_parallel_size`` worker actors (one device and one CPU each)
    and starts them."""

    def __init__(self, config: InfercoreConfig, platform: Platform, model_info: ModelInfo,
                 max_num_batched_tokens: int) -> None:
        check_model_splits(config)
        self.ray = _import_ray()
        self.world_size = config.parallel.world_size
        self.output_rank = output_rank(config)
        self.timeout = config.parallel.worker_timeout
        self.dead_reason: str | None = None
        self.actors: list[Any] = []
        self.placement_group: Any = None
        self.started_ray = not self.ray.is_initialized()
        if self.started_ray:
            self.ray.init(address=os.environ.get("RAY_ADDRESS"), include_dashboard=False, log_to_driver=True)
        try:
            self._start(config, platform, model_info, max_num_batched_tokens)
        except BaseException:
            self.shutdown()
            raise

    def _start(self, config: InfercoreConfig, platform: Platform, model_info: ModelInfo,
               max_num_batched_tokens: int) -> None:
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        on_device = platform.device_type != "cpu"
        bundle = {"CPU": 1, "GPU": 1} if on_device else {"CPU": 1}
        par = config.parallel
        selectors = None
        if par.pipeline_stage_placement == "spread" and par.pipeline_parallel_size > 1:
            nodes = stage_nodes(self.ray, par.pipeline_parallel_size, par.tensor_parallel_size, bundle)
            selectors = [{NODE_ID_LABEL: nodes[rank // par.tensor_parallel_size]} for rank in range(self.world_size)]
        self.placement_group = placement_group([bundle] * self.world_size, strategy="PACK",
                                               bundle_label_selector=selectors)
        try:
            self.ray.get(self.placement_group.ready(), timeout=STARTUP_TIMEOUT_S)
        except self.ray.exceptions.GetTimeoutError:
            raise RuntimeError(f"the Ray cluster could not place {self.world_size} workers of {bundle}; "
                               "add resources or lower --tensor-parallel-size / --pipeline-parallel-size") from None
        actor_cls = self.ray.remote(RayWorkerActor)
        for rank in range(self.world_size):
            strategy = PlacementGroupSchedulingStrategy(self.placement_group, placement_group_bundle_index=rank)
            self.actors.append(actor_cls.options(num_cpus=1, num_gpus=1 if on_device else 0,
                                                 scheduling_strategy=strategy).remote())
        ip = self.ray.get(self.actors[0].node_ip.remote(), timeout=STARTUP_TIMEOUT_S)
        port = self.ray.get(self.actors[0].free_port.remote(), timeout=STARTUP_TIMEOUT_S)
        config_json = config.model_dump_json()
        # Ray shows each actor only its own device, so every rank's device index is 0.
        launches = [msgspec.msgpack.encode(WorkerLaunch(config_json, model_info, max_num_batched_tokens, rank,
                                                        self.world_size, 0, f"tcp://{ip}:{port}", "", "", 0))
                    for rank in range(self.world_size)]
        replies = self._gather([a.start.remote(b) for a, b in zip(self.actors, launches)], STARTUP_TIMEOUT_S, "start")
        errors = [f"worker {r.rank}: {r.error}" for r in replies if r.error]
        if errors:
            raise RuntimeError("workers failed to start: " + "; ".join(errors))
        logger.info("%d Ray workers ready", self.world_size)

    def _gather(self, refs: list[Any], timeout: float, what: str) -> list[Any]:
        """Every reply, in rank order; an actor that dies (or a deadline passing) ends the wait at once."""
        results: dict[Any, Any] = {}
        pending = list(refs)
        deadline = time.monotonic() + timeout
        try:
            while pending:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ExecutorDeadError(f"a Ray worker did not answer {what} within {timeout:.0f} s "
                                            "(--worker-timeout)")
                ready, pending = self.ray.wait(pending, num_returns=1, timeout=min(remaining, 0.5))
                for ref in ready:
                    results[ref] = decode_reply(self.ray.get(ref))
        except self.ray.exceptions.RayError as exc:
            raise ExecutorDeadError(f"a Ray worker died during {what}: {type(exc).__name__}") from None
        return [results[ref] for ref in refs]

    def collective_rpc(self, method: str, args: tuple[Any, ...] = ()) -> list[Any]:
        return self._receive(self._send(method, args), method)

    def submit_step(self, scheduler_output: SchedulerOutput) -> StepFuture:
        refs = self._send("execute_model", (scheduler_output, None))
        future = StepFuture(lambda: future.set_result(self._receive(refs, "execute_model")[self.output_rank]))
        return future

    def _send(self, method: str, args: tuple[Any, ...]) -> list[Any]:
        if self.dead_reason is not None:
            raise ExecutorDeadError(self.dead_reason)
        data = encode_call(method, args)
        return [a.call.remote(data) for a in self.actors]

    def _receive(self, refs: list[Any], method: str) -> list[Any]:
        try:
            replies = self._gather(refs, self.timeout, method)
            failed = next((r for r in replies if r.error), None)
            # As in the multiprocess executor: a worker's error may be its collective losing a peer that died
            # after replying; then the executor is gone, not just this call.
            dead = self._dead_actor(PEER_DEATH_GRACE_S) if failed is not None else None
            if dead is not None:
                raise ExecutorDeadError(f"Ray worker {dead} died (seen after {method} failed: {failed.error})")
        except ExecutorDeadError as exc:
            self.dead_reason = str(exc)
            logger.error("%s", exc)
            raise
        if failed is not None:
            raise RuntimeError(f"worker {failed.rank} failed in {method}: {failed.error}")
        return [decode_value(Worker, method, r) for r in replies]

    def _dead_actor(self, grace_s: float) -> int | None:
        """The rank of a worker actor that has died (found by pinging every actor for ``grace_s``), else None.

        An actor that does not answer in time counts as alive: only Ray's word that it died counts."""
        refs = [actor.node_ip.remote() for actor in self.actors]
        ready, _ = self.ray.wait(refs, num_returns=len(refs), timeout=grace_s)
        for ref in ready:
            try:
                self.ray.get(ref)
            except self.ray.exceptions.RayError:
                return refs.index(ref)
        return None

    def shutdown(self) -> None:
        """Stop the actors, free their placement group, and stop Ray if this executor started it."""
        for actor in self.actors:
            self.ray.kill(actor)
        self.actors = []
        if self.placement_group is not None:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(self.placement_group)
            self.placement_group = None
        if self.started_ray and self.ray.is_initialized():
            self.ray.shutdown()
