"""Start ``infercore serve``'s engine process before the API server's own imports.

The API process imports torch, transformers, FastAPI and the protocol models (seconds); the engine
process, spawned, imports its own and then loads the model. Started one after the other, the two
add up; started first, the engine's start-up runs beside the API process's imports. Only this
module's light imports (the config, the ZMQ client) come before the spawn.
"""

from __future__ import annotations

import logging

from infercore.config import DEMO_MODEL, InfercoreConfig
from infercore.demo import DEMO_NOTICE, resolve_demo_model
from infercore.engine.core_proc import DEFAULT_ENGINE_FACTORY
from infercore.frontend.core_client import EngineCoreClient

logger = logging.getLogger("infercore.server")


def start_engine_early(config: InfercoreConfig,
                       engine_factory: str = DEFAULT_ENGINE_FACTORY) -> EngineCoreClient | None:
    """Spawn the one engine of a one-API-server, one-rank ``serve`` and return its client (whose
    ``start`` then only waits for it); None where the launcher of several processes starts engines."""
    if config.serve.api_server_count > 1 or config.parallel.data_parallel_size > 1:
        return None
    if config.model.model == DEMO_MODEL:
        logger.warning(DEMO_NOTICE)
    # Both processes read the model folder: the demo's is built here, once, before the engine looks.
    resolve_demo_model(config)
    client = EngineCoreClient(config, engine_factory)
    client.spawn()
    return client
