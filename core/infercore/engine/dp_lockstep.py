"""Data-parallel engines stepping together: what expert parallelism across engines needs.

With experts spread over every data-parallel engine's ranks, each MoE layer's token exchange is
collective over all engines, so every engine must run the same number of forward passes. Before each
step the engines agree, over a small gloo group of the engine processes (:class:`DataParallelSync`),
whether any of them has work; if one has, a wave starts: every engine steps, one with nothing
scheduled running a dummy forward pass instead (``execute_dummy_batch``), and they agree again only
every :data:`LOCKSTEP_AGREE_EVERY` steps (all engines count the same steps, so they agree at the same
one), when the wave ends if no engine has work left. Idle, the engines agree every
:data:`LOCKSTEP_IDLE_POLL_MS` (so a request arriving at an idle engine waits at most that long for
the others to join its step). A stopping engine leaves the group; the others'
next agreement fails and they stop too (their clients are being closed alike).
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
import zmq

from infercore.config import ParallelConfig
from infercore.distributed.dp_rendezvous import connect_store
from infercore.distributed.process_group import COLLECTIVE_TIMEOUT_S
from infercore.engine.core_proc import EngineLoop
from infercore.engine.latency_trace import EngineTrace
from infercore.engine.output_sender import OutputSender
from infercore.wire.codec import EngineFailure, MessageKind

logger = logging.getLogger("infercore.engine")

#: While every engine is idle, how long each waits for input between agreements (milliseconds): the
#: longest a request arriving at an idle engine waits for the others to start stepping with it.
LOCKSTEP_IDLE_POLL_MS = 10
#: Steps of a wave between two agreements: at most this many dummy steps run after the last request
#: finishes, for one host round trip per that many steps instead of one per step.
LOCKSTEP_AGREE_EVERY = 16


class DataParallelSync:
    """The engine processes' own gloo group (one rank per data-parallel engine); data-parallel engine 0
    hosts the rendezvous store every process of every engine meets through, so it is made before the
    engine (whose workers join the expert-parallel group over the same store)."""

    def __init__(self, parallel: ParallelConfig) -> None:
        self.rank, self.size = parallel.data_parallel_rank, parallel.data_parallel_size
        #: Kept for the process's life: engine 0's is the store's server.
        self.store = connect_store(parallel, host=self.rank == 0)
        self.group: Any = dist.ProcessGroupGloo(dist.PrefixStore("dp-lockstep", self.store), self.rank, self.size,
                                                datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S))
        self._flag = torch.zeros(1, dtype=torch.int32)
        self._max = dist.AllreduceOptions()
        self._max.reduceOp = dist.ReduceOp.MAX

    def any(self, local: bool) -> bool:
        """Whether any engine has work (collective over the engines)."""
        self._flag[0] = int(local)
        self.group.allreduce([self._flag], self._max).wait()
        return bool(self._flag[0])


class PeerEngineGone(RuntimeError):
    """Another data-parallel engine left the lockstep group (it stopped or died)."""


class LockstepEngineLoop(EngineLoop):
    """The engine loop of a data-parallel engine whose MoE layers exchange tokens with the other engines:
    it steps whenever they do (waves agreed through :class:`DataParallelSync`), and a step this engine
    has no forward pass of its own for runs the dummy one. :attr:`dummy_steps` counts those."""

    def __init__(self, engine: Any, inputs: zmq.Socket | Sequence[zmq.Socket], sender: OutputSender,
                 parent_pid: int, sync: DataParallelSync, trace: EngineTrace | None = None) -> None:
        super().__init__(engine, inputs, sender, parent_pid, trace)
        self.sync = sync
        #: Whether the engines are in a wave (stepping together; input is then read without waiting).
        self._in_wave = False
        #: Steps since the last agreement (every engine counts the same).
        self._unagreed = 0
        self.dummy_steps = 0

    def run(self) -> int:
        try:
            return super().run()
        except PeerEngineGone as exc:
            # The engines stop together (their clients close them all): no traceback for the ones left.
            logger.warning("data-parallel engine %d stops: %s", self.sync.rank, exc)
            self.sender.send_message(EngineFailure(str(exc)), MessageKind.ENGINE_DEAD)
            return 1

    def _agree(self, local: bool) -> bool:
        try:
            return self.sync.any(local)
        except RuntimeError as exc:
            raise PeerEngineGone(f"another data-parallel engine left the step lockstep ({exc})") from exc

    def run_once(self) -> None:
        busy = self._in_wave or self.engine.has_unfinished_requests()
        self._report_idle |= self._drain_input(0 if busy else LOCKSTEP_IDLE_POLL_MS)
        local = self.engine.has_unfinished_requests()
        in_wave = self._in_wave
        if not in_wave or self._unagreed >= LOCKSTEP_AGREE_EVERY:
            self._in_wave, self._unagreed = self._agree(local), 0
        if not self._in_wave:
            if in_wave:
                logger.debug("data-parallel engine %d: every engine is idle (%d dummy steps so far)",
                             self.sync.rank, self.dummy_steps)
            if self._report_idle:
                self.sender.send(self.engine.step(), settled=True)
                self._report_idle = False
            return
        self._unagreed += 1
        executor = self.engine.executor
        launched = executor.steps_launched
        if local:
            self._send(self._step())
            self._report_idle = True
        if executor.steps_launched == launched:
            # Nothing of ours ran on the workers this step: run the forward pass the others' need.
            try:
                executor.collective_rpc("execute_dummy_batch")
            except RuntimeError as exc:  # its exchange found a peer gone
                raise PeerEngineGone(f"a dummy step failed ({exc})") from exc
            self.dummy_steps += 1
