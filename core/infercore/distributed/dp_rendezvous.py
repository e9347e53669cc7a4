"""Where the processes of data-parallel engines meet: the TCP store data-parallel engine 0 hosts at
``data_parallel_master_ip:data_parallel_master_port``, which the launcher of the engines chooses.

Only expert parallelism across data-parallel engines needs it (:func:`spans_data_parallel`): the
engines' step lockstep (:mod:`infercore.engine.dp_lockstep`) and the DP×TP expert-parallel group
(:mod:`infercore.distributed.expert_group`) build their groups over prefixes of that one store.
"""

from __future__ import annotations

import datetime
import socket
from typing import TYPE_CHECKING

from infercore.config import InfercoreConfig, ParallelConfig

if TYPE_CHECKING:
    import torch.distributed as dist


def spans_data_parallel(parallel: ParallelConfig) -> bool:
    """Whether MoE layers' experts spread over every data-parallel engine's ranks (expert parallelism
    with more than one data-parallel engine), so that the engines must step together."""
    return parallel.enable_expert_parallel and parallel.data_parallel_size > 1


def with_data_parallel_master(config: InfercoreConfig) -> InfercoreConfig:
    """``config`` with a rendezvous port chosen (a copy; ``config`` itself when none is needed or one is
    set). Called once by whatever starts the engines, before it makes each rank's configuration."""
    parallel = config.parallel
    if not spans_data_parallel(parallel) or parallel.data_parallel_master_port is not None:
        return config
    chosen = config.model_copy(deep=True)
    with socket.socket() as s:  # (no torch here: the API server process imports this)
        s.bind((parallel.data_parallel_master_ip, 0))
        chosen.parallel.data_parallel_master_port = int(s.getsockname()[1])
    return chosen


def connect_store(parallel: ParallelConfig, *, host: bool) -> dist.Store:
    """The data-parallel rendezvous store: its server when ``host`` (data-parallel engine 0's process,
    which must outlive every other user), else a client of it (waiting for the server to come up)."""
    import torch.distributed as dist

    from infercore.distributed.process_group import COLLECTIVE_TIMEOUT_S

    if parallel.data_parallel_master_port is None:
        raise ValueError("expert parallelism across data-parallel engines needs data_parallel_master_port, "
                         "which the launcher of the engines (infercore serve, AsyncLLM) sets; LLM runs a single "
                         "engine: drop data_parallel_size or enable_expert_parallel there")
    return dist.TCPStore(parallel.data_parallel_master_ip, parallel.data_parallel_master_port, None, host,
                         timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S), wait_for_workers=False)
