"""The ``mp`` executor: one worker process per device on this host, driven over shared memory.

Each call is msgspec-encoded once and published on a shared-memory broadcast queue that every
worker reads; each worker answers on a queue of its own. Every wait has a deadline and watches the
worker processes, so a worker that dies (or hangs inside a collective) turns into
:class:`ExecutorDeadError` within a fraction of a second instead of a hang.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import subprocess
import sys
import time
from collections import deque
from typing import Any, NoReturn

import msgspec

from infercore.config import InfercoreConfig
from infercore.distributed.process_group import free_port
from infercore.distributed.rpc_codec import decode_reply, decode_value, encode_call
from infercore.distributed.shm_queue import QueueTimeout, ShmQueue
from infercore.executor.base import Executor, ExecutorDeadError, check_model_splits
from infercore.executor.step_future import StepFuture
from infercore.executor.worker_proc import SHUTDOWN, WorkerLaunch
from infercore.platforms.interface import Platform
from infercore.wire.model_info import ModelInfo
from infercore.wire.scheduler_output import SchedulerOutput
from infercore.worker.worker import Worker, output_rank

logger = logging.getLogger(__name__)

#: Longest a worker may take to load its shard and report ready.
STARTUP_TIMEOUT_S = 600.0
#: After a worker reports an error, how long to watch for one of its peers exiting: a collective that lost a
#: peer (a connection reset) can report before the dead process is seen to exit.
PEER_DEATH_GRACE_S = 0.2
_CALL_SLOTS, _CALL_SLOT_BYTES = 8, 1 << 20
_REPLY_SLOTS, _REPLY_SLOT_BYTES = 8, 1 << 18


def device_indices(config: InfercoreConfig, platform: Platform) -> list[int]:
    """The device of each rank: with ``w = tp * pp`` ranks per engine, data-parallel engine ``d`` takes
    devices ``d*w .. d*w + w - 1`` (rank ``pp_rank * tp + tp_rank`` the ``rank``-th of them)."""
    par = config.parallel
    tp, pp = par.tensor_parallel_size, par.pipeline_parallel_size
    world = tp * pp
    if platform.device_type == "cpu":
        return [0] * world
    first = par.data_parallel_rank * world
    needed = par.data_parallel_size * world
    available = platform.device_count()
    if needed > available:
        raise ValueError(f"tensor_parallel_size {tp} x pipeline_parallel_size {pp} x data_parallel_size "
                         f"{par.data_parallel_size} needs {needed} {platform.name} devices but {available} are "
                         "visible; lower the sizes or expose more devices")
    return list(range(first, first + world))


class MultiprocExecutor(Executor):
    """Starts ``tensor_parallel_size * pipeline_parallel_size`` worker processes and waits until each has
    loaded its shard."""

    def __init__(self, config: InfercoreConfig, platform: Platform, model_info: ModelInfo,
                 max_num_batched_tokens: int) -> None:
        check_model_splits(config)
        self.world_size = config.parallel.world_size
        self.output_rank = output_rank(config)
        self.timeout = config.parallel.worker_timeout
        #: Steps sent (:meth:`submit_step`) whose replies are not read yet, oldest first.
        self._pending: deque[StepFuture] = deque()
        self.dead_reason: str | None = None
        self.procs: list[subprocess.Popen[bytes]] = []
        self.calls = ShmQueue.create(self.world_size, _CALL_SLOTS, _CALL_SLOT_BYTES)
        self.reply_queues = [ShmQueue.create(1, _REPLY_SLOTS, _REPLY_SLOT_BYTES) for _ in range(self.world_size)]
        self.replies = [q.reader(0) for q in self.reply_queues]
        self._closed = False
        atexit.register(self.shutdown)  # an LLM never shut down still stops its workers and frees the queues
        try:
            self._start(config, model_info, max_num_batched_tokens, device_indices(config, platform))
        except BaseException:
            self.shutdown()
            raise

    def _start(self, config: InfercoreConfig, model_info: ModelInfo, max_num_batched_tokens: int,
               devices: list[int]) -> None:
        init_method = f"tcp://127.0.0.1:{free_port()}"
        config_json = config.model_dump_json()
        for rank in range(self.world_size):
            launch = WorkerLaunch(config_json, model_info, max_num_batched_tokens, rank, self.world_size,
                                  devices[rank], init_method, self.calls.name, self.reply_queues[rank].name,
                                  os.getpid())
            proc = subprocess.Popen([sys.executable, "-m", "infercore.executor.worker_proc"], stdin=subprocess.PIPE)
            self.procs.append(proc)
            assert proc.stdin is not None
            proc.stdin.write(msgspec.msgpack.encode(launch))
            proc.stdin.close()
        self._wait_ready()
        for queue in [self.calls, *self.reply_queues]:
            queue.unlink()  # every worker has attached: no name is left to leak
        logger.info("%d worker processes ready", self.world_size)

    def _wait_ready(self) -> None:
        """Wait for every worker's ready message; the first error (or death) ends the wait, since its
        peers may be waiting for it in the process group's rendezvous."""
        waiting = set(range(self.world_size))
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while waiting:
            for rank in sorted(waiting):
                if self.replies[rank].poll():
                    reply = decode_reply(self.replies[rank].read(timeout=1.0))
                    if reply.error:
                        raise RuntimeError(f"worker {rank} failed to start: {reply.error}")
                    waiting.discard(rank)
            if waiting and (not self._all_alive() or time.monotonic() > deadline):
                reason = self._failure() if not self._all_alive() else f"no answer within {STARTUP_TIMEOUT_S:.0f} s"
                raise RuntimeError(f"workers {sorted(waiting)} did not start: {reason}; see the log above")
            time.sleep(0.01)

    def _all_alive(self) -> bool:
        return all(p.poll() is None for p in self.procs)

    def _peer_died(self, grace_s: float) -> bool:
        """Whether a worker process has exited, or does within ``grace_s``."""
        deadline = time.monotonic() + grace_s
        while self._all_alive():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)
        return True

    def _failure(self) -> str:
        dead = [(rank, p) for rank, p in enumerate(self.procs) if p.poll() is not None]
        if not dead:
            return f"no answer within {self.timeout:.0f} s (--worker-timeout)"
        return "; ".join(f"worker {rank} (pid {p.pid}) exited with code {p.returncode}" for rank, p in dead)

    @property
    def worker_pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def collective_rpc(self, method: str, args: tuple[Any, ...] = ()) -> list[Any]:
        while self._pending:  # replies come in call order: those of steps sent before are read first
            self._resolve(self._pending[0])
        self._send(method, args)
        return self._receive(method)

    def submit_step(self, scheduler_output: SchedulerOutput) -> StepFuture:
        self._send("execute_model", (scheduler_output, None))
        future = StepFuture(lambda: self._resolve(future))
        self._pending.append(future)
        return future

    def _resolve(self, target: StepFuture) -> None:
        """Read the replies of the steps sent up to ``target``, resolving their futures in order; a
        failure of ``target`` (or of a step before it) raises."""
        while self._pending:
            future = self._pending.popleft()
            try:
                output = self._receive("execute_model")[self.output_rank]
            except ExecutorDeadError:
                self._pending.clear()
                raise
            future.set_result(output)
            if future is target:
                return

    def _send(self, method: str, args: tuple[Any, ...]) -> None:
        if self.dead_reason is not None:
            raise ExecutorDeadError(self.dead_reason)
        try:
            self.calls.write(encode_call(method, args), self.timeout, self._all_alive)
        except QueueTimeout:
            self._declare_dead(method)

    def _receive(self, method: str) -> list[Any]:
        try:
            replies = [decode_reply(q.read(self.timeout, self._all_alive)) for q in self.replies]
        except QueueTimeout:
            self._declare_dead(method)
        failed = next((r for r in replies if r.error), None)
        if failed is not None:
            # A worker's error may be its collective losing a peer that died after replying (a pipeline stage
            # reading from a killed one): then the executor is gone, not just this call, and the engine must
            # say so rather than idle with a dead worker until the next request.
            if self._peer_died(PEER_DEATH_GRACE_S):
                self._declare_dead(method)
            raise RuntimeError(f"worker {failed.rank} failed in {method}: {failed.error}")
        return [decode_value(Worker, method, r) for r in replies]

    def _declare_dead(self, method: str) -> NoReturn:
        self.dead_reason = f"a worker is gone or hung during {method}: {self._failure()}"
        logger.error("%s", self.dead_reason)
        raise ExecutorDeadError(self.dead_reason) from None

    def shutdown(self) -> None:
        """Ask the workers to stop and give them a few seconds; terminate (then kill) the rest. After a
        worker died the others may sit in a collective that never completes, so they are stopped at once."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.shutdown)
        healthy = self.procs and self.dead_reason is None and self._all_alive()
        if healthy:
            with contextlib.suppress(QueueTimeout):
                self.calls.write(encode_call(SHUTDOWN), timeout=2.0, still_alive=self._all_alive)
        for proc in self.procs:
            if healthy:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(5.0)
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(3.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs = []
        self.calls.close()
        for queue in self.reply_queues:
            queue.close()
