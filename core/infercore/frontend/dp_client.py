"""Data parallelism: N EngineCore processes behind one API server.

:class:`DataParallelClient` has the interface of :class:`EngineCoreClient` and fans out to one
client per engine. Each request goes to the least-loaded engine (the most running + waiting
requests this client has sent it and not seen finish), its aborts go to that engine, outputs are
read from every engine as they come, and the stats sent on with each batch are the sum over the
engines (so ``/metrics`` shows the whole server).

With several API server processes (``--api-server-count``) the launcher starts the engines and every
API server has a DataParallelClient of its own whose per-engine clients use that server's sockets
(``endpoints``): every API server reaches every engine, and balances its own requests over them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict

import msgspec

from infercore.config import InfercoreConfig
from infercore.distributed.dp_rendezvous import with_data_parallel_master
from infercore.engine.core_proc import DEFAULT_ENGINE_FACTORY
from infercore.frontend.core_client import EngineCoreClient, EngineEndpoint
from infercore.wire.messages import EngineCoreOutputs, EngineCoreRequest, SchedulerStats
from infercore.wire.model_info import ModelInfo

logger = logging.getLogger(__name__)


def merge_stats(stats: list[SchedulerStats]) -> SchedulerStats:
    """The server-wide view: counts and blocks summed, KV usage weighted by each engine's blocks."""
    total_blocks = sum(s.num_total_blocks for s in stats)
    usage = sum(s.kv_cache_usage * s.num_total_blocks for s in stats) / total_blocks if total_blocks else 0.0
    return SchedulerStats(
        num_running=sum(s.num_running for s in stats), num_waiting=sum(s.num_waiting for s in stats),
        kv_cache_usage=usage, prefix_cache_queries=sum(s.prefix_cache_queries for s in stats),
        prefix_cache_hits=sum(s.prefix_cache_hits for s in stats), num_free_blocks=sum(s.num_free_blocks for s in stats),
        num_total_blocks=total_blocks, num_preemptions=sum(s.num_preemptions for s in stats),
        spec_num_drafts=sum(s.spec_num_drafts for s in stats),
        spec_num_draft_tokens=sum(s.spec_num_draft_tokens for s in stats),
        spec_num_accepted_tokens=sum(s.spec_num_accepted_tokens for s in stats),
        spec_num_accepted_tokens_per_pos=[sum(pos) for pos in zip(*(s.spec_num_accepted_tokens_per_pos for s in stats))])


class DataParallelClient:
    """One :class:`EngineCoreClient` per data-parallel rank, used as one.

    ``endpoints`` (one per rank, in rank order) reach engines the launcher started; without them each
    client starts its own engine."""

    def __init__(self, config: InfercoreConfig, engine_factory: str = DEFAULT_ENGINE_FACTORY,
                 endpoints: list[EngineEndpoint] | None = None) -> None:
        if endpoints is None:
            config = with_data_parallel_master(config)  # where the engines meet, when they must
        self.config = config
        size = config.parallel.data_parallel_size
        if endpoints is not None and len(endpoints) != size:
            raise ValueError(f"{len(endpoints)} engine endpoints for data_parallel_size {size}")
        self.clients: list[EngineCoreClient] = []
        for rank in range(size):
            self.clients.append(EngineCoreClient(rank_config(config, rank), engine_factory,
                                                 endpoints[rank] if endpoints is not None else None))
        self.model_info: ModelInfo | None = None
        self.initial_stats: SchedulerStats | None = None
        self.stats = [SchedulerStats() for _ in range(size)]
        #: Requests sent to each engine and not yet finished or aborted (its running + waiting).
        self.load = [0] * size
        #: Requests each engine was sent in all.
        self.routed = [0] * size
        self._owner: dict[str, int] = {}
        self._receiving: dict[int, asyncio.Future[EngineCoreOutputs]] = {}

    async def start(self, timeout: float | None = None) -> ModelInfo:
        """Start every engine; if one fails to start, stop them all and raise its error."""
        results = await asyncio.gather(*(c.start(timeout) for c in self.clients), return_exceptions=True)
        failure = next((r for r in results if isinstance(r, BaseException)), None)
        if failure is not None:
            self.close()
            raise failure
        infos: list[ModelInfo] = list(results)  # type: ignore[arg-type]
        self.stats = [c.initial_stats or SchedulerStats() for c in self.clients]
        self.initial_stats = merge_stats(self.stats)
        self.model_info = msgspec.structs.replace(infos[0], num_kv_blocks=sum(i.num_kv_blocks for i in infos))
        return self.model_info

    async def wait_dead(self) -> int | None:
        """Return (that engine's exit code) once any engine process has ended."""
        waits = [asyncio.ensure_future(c.wait_dead()) for c in self.clients]
        try:
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            return next(iter(done)).result()
        finally:
            for wait in waits:
                wait.cancel()

    async def add_request(self, request: EngineCoreRequest) -> None:
        engine = min(range(len(self.clients)), key=lambda i: (self.load[i], i))
        self._owner[request.request_id] = engine
        self.load[engine] += 1
        self.routed[engine] += 1
        await self.clients[engine].add_request(request)

    def _release(self, request_id: str) -> int | None:
        engine = self._owner.pop(request_id, None)
        if engine is not None:
            self.load[engine] -= 1
        return engine

    async def abort_requests(self, request_ids: list[str]) -> None:
        """Send each abort to the engine running that request (finished ones need none)."""
        by_engine: dict[int, list[str]] = defaultdict(list)
        for request_id in request_ids:
            engine = self._release(request_id)
            if engine is not None:
                by_engine[engine].append(request_id)
        for engine, ids in by_engine.items():
            await self.clients[engine].abort_requests(ids)

    async def get_outputs(self) -> EngineCoreOutputs:
        """The next batch from whichever engine has one, its stats replaced by the merged ones."""
        for engine, client in enumerate(self.clients):
            if engine not in self._receiving:
                self._receiving[engine] = asyncio.ensure_future(client.get_outputs())
        await asyncio.wait(self._receiving.values(), return_when=asyncio.FIRST_COMPLETED)
        engine = next(i for i, future in sorted(self._receiving.items()) if future.done())
        outputs = self._receiving.pop(engine).result()
        for output in outputs.outputs:
            if output.finished:
                self._release(output.request_id)
        if outputs.stats is not None:
            self.stats[engine] = outputs.stats
            outputs.stats = merge_stats(self.stats)
        return outputs

    def close(self, timeout: float = 5.0) -> None:
        """Stop every engine."""
        for future in self._receiving.values():
            future.cancel()
        for future in self._receiving.values():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                if future.done():
                    future.result()
        self._receiving.clear()
        for client in self.clients:
            client.close(timeout)


def rank_config(config: InfercoreConfig, rank: int) -> InfercoreConfig:
    """The configuration of data-parallel engine ``rank``."""
    engine_config = config.model_copy(deep=True)
    engine_config.parallel.data_parallel_rank = rank
    return engine_config


def make_engine_client(config: InfercoreConfig, engine_factory: str = DEFAULT_ENGINE_FACTORY,
                       endpoints: list[EngineEndpoint] | None = None) -> EngineCoreClient | DataParallelClient:
    """The client for ``config``: one engine, or one per data-parallel rank; ``endpoints`` (one per
    rank) reach engines the launcher started instead of starting them."""
    if config.parallel.data_parallel_size > 1:
        return DataParallelClient(config, engine_factory, endpoints)
    if endpoints is not None and len(endpoints) != 1:
        raise ValueError(f"{len(endpoints)} engine endpoints for one engine")
    return EngineCoreClient(config, engine_factory, endpoints[0] if endpoints is not None else None)
