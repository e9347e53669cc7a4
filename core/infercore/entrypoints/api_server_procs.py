"""``infercore serve --api-server-count N``: a launcher, the engine(s) and N API server processes.

The launcher (the process ``infercore serve`` started) binds the listening TCP socket once, makes a
private folder for the ipc sockets and the Prometheus multiprocess files, starts the engine process of
every data-parallel rank and N API server processes (spawned), then only watches them. Between the two it
asks once which tokenizer class ``AutoTokenizer`` picks for the model (a short-lived process, run beside
the engines' start, or infercore's cache folder) and hands the answer to every API server, so that N API
servers do not start N such processes, each importing transformers and torch.

Every API server serves HTTP on the one listening socket, inherited as a duplicate of the launcher's
(uvicorn ``serve(sockets=[sock])``): the kernel hands each new connection to one of the processes
waiting in ``accept``. One socket rather than SO_REUSEPORT because the port is then bound exactly once,
before anything starts (a busy port fails at once, with one error), and no other process can join the
port's group and take connections. Each API server binds its own ZMQ input/output pair for every
engine (:class:`~infercore.frontend.core_client.EngineEndpoint`); an engine polls the inputs of all API
servers and returns each request's outputs to the server that sent it. With ``--data-parallel-size M``
each API server has a DataParallelClient over all M engines, balancing its own requests.

Lifecycle: SIGTERM or SIGINT to the launcher sends SIGTERM to every API server, which drains (as the
single server does), then stops the engines; the exit code is 0. If any API server or engine ends on its
own, the launcher stops the rest and exits with 1. The engines exit when the launcher is gone, and the API
servers when their engine is, so nothing outlives a killed launcher; the engine removes the folder then.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import socket
import sys
import time
import types
from dataclasses import dataclass
from multiprocessing.process import BaseProcess

from infercore.config import DEMO_MODEL, InfercoreConfig
from infercore.demo import resolve_demo_model
from infercore.distributed.dp_rendezvous import with_data_parallel_master
from infercore.frontend.core_client import EngineEndpoint, make_socket_dir, run_engine
from infercore.frontend.dp_client import rank_config
from infercore.tokenizer_loading import auto_tokenizer_class_remembered

logger = logging.getLogger("infercore.server")

#: Seconds an API server may take beyond ``--shutdown-timeout`` (aborts, closing connections).
_STOP_GRACE_S = 6.0
#: Seconds an engine may take to exit on SIGTERM before it is killed.
_ENGINE_STOP_S = 5.0


@dataclass(frozen=True)
class ApiServerSlot:
    """What one of several API server processes is given: its index, how to reach every engine (one
    endpoint per data-parallel rank), the shared listening socket and the name of the tokenizer class
    ``AutoTokenizer`` picks for the model, as the launcher found it (None: not known, the API server asks)."""

    index: int
    endpoints: list[EngineEndpoint]
    sock: socket.socket
    tokenizer_class: str | None = None


def bind_listening_socket(host: str, port: int) -> socket.socket:
    """The TCP socket every API server accepts on, bound and listening."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port} ({exc.strerror}); pick another --port or --host") from exc
    sock.listen(2048)
    return sock


def endpoints_of(socket_dir: str, server: int, data_parallel_size: int, engine_pids: list[int]
                 ) -> list[EngineEndpoint]:
    """API server ``server``'s endpoint of every engine (rank order)."""
    return [EngineEndpoint(input_address=f"ipc://{socket_dir}/in-{server}-{rank}",
                           output_address=f"ipc://{socket_dir}/out-{server}-{rank}",
                           engine_pid=engine_pids[rank], id_prefix=f"{server}:")
            for rank in range(data_parallel_size)]


def run_api_server(config_json: str, engine_factory: str, slot: ApiServerSlot) -> None:
    """The entry of one API server process (importable for the spawn context)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the launcher, which sends SIGTERM
    logging.basicConfig(level=logging.INFO, format=f"%(levelname)s %(name)s [api {slot.index}]: %(message)s")
    from infercore.entrypoints.serve import event_loop_runner, serve

    config = InfercoreConfig.model_validate_json(config_json)
    sys.exit(event_loop_runner()(serve(config, engine_factory, slot)))


class _Launcher:
    """Starts the engines and the API servers, watches them and stops them all."""

    def __init__(self, config: InfercoreConfig, engine_factory: str) -> None:
        self.config = config
        self.engine_factory = engine_factory
        self.ctx = multiprocessing.get_context("spawn")
        self.engines: list[BaseProcess] = []
        self.servers: list[BaseProcess] = []
        self.stop_signal: int | None = None
        #: API servers sent SIGTERM (by pid), so stopping after a signal does not send a second one.
        self._signalled: set[int] = set()

    def _on_signal(self, sig: int, frame: types.FrameType | None) -> None:
        if self.stop_signal is None:
            logger.info("received %s: draining the API servers", signal.Signals(sig).name)
            self._signal_servers()  # the drain starts now, not when the watch loop next wakes
        else:  # a second signal: the API servers stop at once (see serve._Server)
            self._signal_servers(again=True)
        self.stop_signal = sig

    def start(self, sock: socket.socket, socket_dir: str) -> None:
        """Spawn every engine, then (the tokenizer class asked while the engines start) every API server with
        its endpoints and that class; no API server where a stop signal came meanwhile."""
        count = self.config.serve.api_server_count
        size = self.config.parallel.data_parallel_size
        engines_config = with_data_parallel_master(self.config)  # where the engines meet, when they must
        for rank in range(size):
            inputs = [f"ipc://{socket_dir}/in-{server}-{rank}" for server in range(count)]
            outputs = [f"ipc://{socket_dir}/out-{server}-{rank}" for server in range(count)]
            engine = self.ctx.Process(
                target=run_engine, name=f"infercore-engine-core-{rank}", daemon=True,
                args=(socket_dir, rank_config(engines_config, rank).model_dump_json(), inputs, outputs, os.getpid(),
                      self.engine_factory))
            engine.start()
            logger.info("engine %d started (pid %d)", rank, engine.pid)
            self.engines.append(engine)
        pids = [engine.pid or 0 for engine in self.engines]
        tokenizer_class = self.tokenizer_class()
        if self.stop_signal is not None:
            return  # stopped while the tokenizer class was asked: no API server to start and stop again
        config_json = self.config.model_dump_json()
        for server in range(count):
            slot = ApiServerSlot(server, endpoints_of(socket_dir, server, size, pids), sock, tokenizer_class)
            process = self.ctx.Process(target=run_api_server, name=f"infercore-api-server-{server}", daemon=True,
                                       args=(config_json, self.engine_factory, slot))
            process.start()
            logger.info("API server %d started (pid %d)", server, process.pid)
            self.servers.append(process)

    def tokenizer_class(self) -> str | None:
        """The name of the tokenizer class ``AutoTokenizer`` picks for the model, asked once for every API server
        (:func:`~infercore.tokenizer_loading.auto_tokenizer_class_remembered`: a short-lived process, whose
        answer for a local folder is remembered; this process imports neither transformers nor torch). None
        with ``--skip-tokenizer-init``, or where it is not known: each API server then asks itself, and its own
        load says what is wrong."""
        if self.config.model.skip_tokenizer_init:
            return None
        try:
            answer = auto_tokenizer_class_remembered(self.config.model, give_up=self._not_worth_waiting)
        except Exception as exc:  # noqa: BLE001 - the API servers ask again
            logger.debug("could not name the tokenizer class: %s", exc)
            return None
        if answer is not None:
            logger.info("tokenizer class %s (AutoTokenizer's) for every API server", answer)
        return answer

    def _not_worth_waiting(self) -> bool:
        """Whether a stop signal came or an engine has already ended: the launcher then stops waiting for the
        tokenizer class (its helper process is killed) and goes on to stop, or to report the engine."""
        return self.stop_signal is not None or not all(engine.is_alive() for engine in self.engines)

    def watch(self) -> BaseProcess | None:
        """Wait until a stop signal (None) or until some process ends (that process)."""
        sentinels = {process.sentinel: process for process in self.engines + self.servers}
        while self.stop_signal is None:
            ready = multiprocessing.connection.wait(list(sentinels), timeout=0.5)
            # A server ending after a stop signal arrived (during the wait) is the drain it asked for.
            if ready and self.stop_signal is None:
                return sentinels[ready[0]]  # type: ignore[index]
        return None

    def _signal_servers(self, again: bool = False) -> None:
        """SIGTERM to every live API server not sent one yet; with ``again``, to every live one (a second
        SIGTERM stops a draining server at once)."""
        for process in self.servers:
            if process.is_alive() and process.pid is not None and (again or process.pid not in self._signalled):
                os.kill(process.pid, signal.SIGTERM)
                self._signalled.add(process.pid)

    def stop(self) -> bool:
        """Drain and stop the API servers, then the engines; True if every API server exited cleanly."""
        self._signal_servers()
        deadline = time.monotonic() + self.config.serve.shutdown_timeout + _STOP_GRACE_S
        for process in self.servers:
            process.join(max(0.0, deadline - time.monotonic()))
        for process in self.servers:
            if process.is_alive():
                logger.warning("API server %s did not stop in time; killing it", process.name)
                process.kill()
                process.join()
        for engine in self.engines:
            if engine.is_alive():
                engine.terminate()
        for engine in self.engines:
            engine.join(_ENGINE_STOP_S)
            if engine.is_alive():
                engine.kill()
                engine.join()
        # A server stopped by the SIGTERM before it installed its handler (still starting) also stopped as asked.
        return all(process.exitcode in (0, -signal.SIGTERM) for process in self.servers)


def launch(config: InfercoreConfig, engine_factory: str) -> int:
    """Run ``--api-server-count`` API servers in front of the engine(s) until stopped (the flags already
    checked, parsers included); the exit code."""
    from infercore.demo import DEMO_NOTICE

    if config.model.model == DEMO_MODEL:
        logger.warning(DEMO_NOTICE)
    resolve_demo_model(config)
    try:
        sock = bind_listening_socket(config.serve.host, config.serve.port)
    except OSError as exc:
        logger.error("%s", exc)
        return 1
    port = sock.getsockname()[1]
    socket_dir = make_socket_dir()
    metrics_dir = os.path.join(socket_dir, "metrics")
    os.mkdir(metrics_dir, 0o700)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir  # read by prometheus_client as it is imported
    launcher = _Launcher(config, engine_factory)
    previous = {sig: signal.signal(sig, launcher._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    ended: BaseProcess | None = None
    clean = False
    try:
        launcher.start(sock, socket_dir)
        sock.close()  # the API servers hold their duplicates; the port is free once they all have stopped
        logger.info("serving on http://%s:%d with %d API server processes", config.serve.host, port,
                    config.serve.api_server_count)
        ended = launcher.watch()
        if ended is not None:
            logger.error("%s exited unexpectedly (exit code %s); stopping the server", ended.name, ended.exitcode)
    finally:
        clean = launcher.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sock.close()
        shutil.rmtree(socket_dir, ignore_errors=True)
    return 0 if ended is None and clean else 1
