"""`infercore serve [MODEL]`: start the EngineCore process and the OpenAI-compatible HTTP server.

Its flags (one per configuration field) are built by :mod:`infercore.entrypoints.serve_args`. With ``--api-server-count N`` (N > 1) this process becomes the launcher of
:mod:`infercore.entrypoints.api_server_procs`, and each of its N API server processes runs
:func:`serve` with its :class:`~infercore.entrypoints.api_server_procs.ApiServerSlot`.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import types
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

import uvicorn

from infercore.config import DEMO_MODEL, InfercoreConfig
from infercore.demo import resolve_demo_model
from infercore.engine.core_proc import DEFAULT_ENGINE_FACTORY
from infercore.frontend.async_llm import AsyncLLM
from infercore.frontend.core_client import EngineCoreClient, EngineStartupError
from infercore.gc_heap import freeze_startup_heap

if TYPE_CHECKING:
    from infercore.entrypoints.api_server_procs import ApiServerSlot

logger = logging.getLogger("infercore.server")


class _Server(uvicorn.Server):
    """uvicorn with a draining SIGTERM/SIGINT (503 for new requests, wait for in-flight ones) and an exit code.

    One of several API server processes (``only_sigterm``) ignores SIGINT: Ctrl-C reaches the whole
    process group, and the launcher turns it into the SIGTERM that starts every server's drain.
    """

    def __init__(self, config: uvicorn.Config, app_state: Any, engine: AsyncLLM, shutdown_timeout: float,
                 only_sigterm: bool = False) -> None:
        super().__init__(config)
        self.app_state = app_state
        self.engine = engine
        self.shutdown_timeout = shutdown_timeout
        self.only_sigterm = only_sigterm
        self.exit_code = 0
        self._loop: asyncio.AbstractEventLoop | None = None

    async def serve(self, sockets: Any = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: types.FrameType | None) -> None:
        if self.only_sigterm and sig == signal.SIGINT:
            return
        drain = self.app_state.drain
        if drain.draining or self._loop is None:
            super().handle_exit(sig, frame)  # a second signal: stop now
            return
        logger.info("received %s: refusing new requests, finishing %d in flight (up to %.0f s)",
                    signal.Signals(sig).name, drain.in_flight, self.shutdown_timeout)
        drain.draining = True
        self.engine.stop_accepting()
        self._loop.call_soon_threadsafe(lambda: self._loop.create_task(self._drain()))

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.shutdown_timeout
        while self.app_state.drain.in_flight > 0 and loop.time() < deadline:
            await asyncio.sleep(0.05)
        if self.app_state.drain.in_flight:
            logger.warning("%d requests still running after %.0f s; aborting them",
                           self.app_state.drain.in_flight, self.shutdown_timeout)
            self.engine.abort_all("the server shut down before the request finished")
            deadline = loop.time() + 2.0
            while self.app_state.drain.in_flight > 0 and loop.time() < deadline:
                await asyncio.sleep(0.05)
        self.should_exit = True

    def engine_died(self, reason: str) -> None:
        """Fail fast: let in-flight requests get their errors, then stop with a non-zero exit code."""
        self.exit_code = 1
        if self._loop is not None:
            self._loop.call_later(1.0, lambda: setattr(self, "should_exit", True))


async def serve(config: InfercoreConfig, engine_factory: str = DEFAULT_ENGINE_FACTORY,
                slot: ApiServerSlot | None = None, client: EngineCoreClient | None = None) -> int:
    """Run the server until it is stopped; returns the process exit code.

    Without ``slot`` this process starts the engine (or takes ``client``, whose engine
    :func:`~infercore.entrypoints.early_engine.start_engine_early` started) and listens on
    ``--host``/``--port``; with one it is one of several API server processes: it reaches the engines
    the launcher started through the slot's endpoints and serves on the slot's (shared) listening socket."""
    from infercore.demo import DEMO_NOTICE
    from infercore.entrypoints.openai.app import build_app
    from infercore.entrypoints.openai.http_protocol import MAX_HEAD_BYTES, bounded_http_protocol
    from infercore.entrypoints.openai.metrics import ServerMetrics
    from infercore.frontend.dp_client import make_engine_client
    from infercore.startup_timeline import TIMELINE, startup_phase

    if config.model.model == DEMO_MODEL:
        logger.warning(DEMO_NOTICE)
    resolve_demo_model(config)
    model_name = config.model.served_model_name or config.model.model
    metrics = ServerMetrics(model_name, api_server=slot.index if slot is not None else None)
    try:
        if slot is not None:
            client = make_engine_client(config, engine_factory, slot.endpoints)
        with startup_phase("engine and tokenizer"):
            starting = asyncio.ensure_future(AsyncLLM.start(
                config, engine_factory, listener=metrics, client=client,
                tokenizer_class=slot.tokenizer_class if slot is not None else None))
            # The imports are done and live as long as the server: freeze them while the engine starts, so
            # the collection after start-up (below) walks only what was made since.
            await asyncio.sleep(0)
            freeze_startup_heap()
            engine = await starting
    except (EngineStartupError, ValueError) as exc:
        logger.error("the engine failed to start: %s", exc)
        return 1
    try:
        app = build_app(config, engine, metrics, model_name)
        protocol = bounded_http_protocol(config.serve.request_read_timeout, config.serve.max_connections,
                                         config.serve.http_parser,
                                         header_timeout=config.serve.request_header_timeout,
                                         max_connections_per_client=config.serve.max_connections_per_client)
        uv_config = uvicorn.Config(app, host=config.serve.host, port=config.serve.port, http=protocol,
                                   log_level=config.serve.uvicorn_log_level, timeout_graceful_shutdown=2,
                                   access_log=not config.serve.disable_log_requests, h11_max_incomplete_event_size=MAX_HEAD_BYTES)
        server = _Server(uv_config, app.state.server, engine, config.serve.shutdown_timeout,
                         only_sigterm=slot is not None)
        engine.on_engine_dead = server.engine_died
        where = f"API server {slot.index} " if slot is not None else ""
        port = slot.sock.getsockname()[1] if slot is not None else config.serve.port
        logger.info("%sserving %s (max_model_len %d) on http://%s:%d", where, model_name,
                    engine.model_info.max_model_len, config.serve.host, port)
        TIMELINE.log_summary(f"{where}the API server (the engine's own is in its log lines)")
        # The app, the engine client and every import live as long as the server: a full collection
        # walking them would stall every stream of this process (ITL spikes of several milliseconds).
        freeze_startup_heap()
        await server.serve(sockets=[slot.sock] if slot is not None else None)
        if not server.started and server.exit_code == 0:
            return 1
        return server.exit_code
    finally:
        await engine.shutdown()


def event_loop_runner() -> Callable[[Coroutine[Any, Any, int]], int]:
    """``uvloop.run`` where uvloop is installed (a faster event loop for the HTTP path), else ``asyncio.run``."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run
    return uvloop.run


def run_serve_config(config: InfercoreConfig, engine_factory: str = DEFAULT_ENGINE_FACTORY,
                     client: EngineCoreClient | None = None) -> int:
    """Serve ``config`` with one API server until stopped (its flags already checked: see
    ``serve_args.run_serve_command``); ``client`` is an engine already starting."""
    return event_loop_runner()(serve(config, engine_factory, client=client))
