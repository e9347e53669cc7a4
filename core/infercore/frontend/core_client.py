"""The API process's side of the engine wire: start the EngineCore process and talk to it over ZMQ.

With one API process the client starts its engine itself. With several (``--api-server-count``) the
launcher starts the engine and tells each API process's client where to reach it (an
:class:`EngineEndpoint`); the client binds its own socket pair there, tags its request ids with its
server's prefix (the engine routes outputs by id) and watches the engine by its pid.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec
import zmq
import zmq.asyncio

from infercore.config import InfercoreConfig
from infercore.engine.core_proc import DEFAULT_ENGINE_FACTORY, run_engine_core
from infercore.wire.codec import AbortRequests, EngineFailure, MessageKind, WireCodec
from infercore.wire.messages import EngineCoreOutputs, EngineCoreRequest, SchedulerStats
from infercore.wire.model_info import ModelInfo

#: Socket folders are named after the API process that binds them, so a folder whose process is gone
#: (killed before it could remove it) is recognised as stale.
_SOCKET_DIR_PREFIX = "infercore-ipc-"
_SOCKET_DIR = re.compile(re.escape(_SOCKET_DIR_PREFIX) + r"(\d+)-")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_socket_dirs(parent: str | None = None) -> list[str]:
    """Remove this user's socket folders (in ``parent``, default the temp folder) whose API process is
    gone; returns the folders removed."""
    removed = []
    for entry in Path(parent or tempfile.gettempdir()).iterdir():
        match = _SOCKET_DIR.match(entry.name)
        with contextlib.suppress(OSError):
            if match and entry.is_dir() and entry.stat().st_uid == os.getuid() and not _pid_alive(int(match[1])):
                shutil.rmtree(entry)
                removed.append(str(entry))
    return removed


def make_socket_dir() -> str:
    """A private (0700) folder for ipc sockets, named after this process (see remove_stale_socket_dirs)."""
    remove_stale_socket_dirs()
    folder = tempfile.mkdtemp(prefix=f"{_SOCKET_DIR_PREFIX}{os.getpid()}-")
    os.chmod(folder, 0o700)
    return folder


def run_engine(socket_dir: str, config_json: str, input_address: str | Sequence[str],
               output_address: str | Sequence[str], parent_pid: int, engine_factory: str) -> None:
    """The engine process's entry: run the engine, and remove the socket folder if the process that
    owns it died first (killed, it could not)."""
    try:
        run_engine_core(config_json, input_address, output_address, parent_pid, engine_factory)
    finally:
        if os.getppid() != parent_pid:
            shutil.rmtree(socket_dir, ignore_errors=True)


class EngineStartupError(RuntimeError):
    """The engine process could not start; the message says why."""


class EngineDeadError(RuntimeError):
    """The engine process died while serving."""


@dataclass(frozen=True)
class EngineEndpoint:
    """Where an API server process reaches an engine that the launcher started.

    The API server binds ``input_address`` and ``output_address`` (the engine connects to them),
    prefixes every request id it sends with ``id_prefix`` (ids must be unique across the API servers
    that share the engine) and knows the engine is gone when process ``engine_pid`` ends.
    """

    input_address: str
    output_address: str
    engine_pid: int
    id_prefix: str


async def wait_pid_exit(pid: int) -> None:
    """Return once process ``pid`` (not necessarily a child of this one) has ended."""
    loop = asyncio.get_running_loop()
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except (AttributeError, OSError):  # no pidfd on this platform: poll
        while _pid_alive(pid):
            await asyncio.sleep(0.2)
        return
    gone = loop.create_future()
    loop.add_reader(fd, lambda: gone.done() or gone.set_result(None))
    try:
        await gone
    finally:
        loop.remove_reader(fd)
        os.close(fd)


class EngineCoreClient:
    """Starts the EngineCore process, sends it requests and aborts, and receives its outputs.

    Both sockets are ``ipc://`` files in a private (0700) temporary folder, bound here; the engine
    connects to them. Whoever outlives the other removes the folder; folders left by processes killed
    together are removed when the next client starts.

    Given an ``endpoint``, the client starts no engine: it binds the endpoint's addresses (in the
    launcher's folder, which the launcher removes), waits for the ready message of the engine the
    launcher started, and on ``close`` only closes its sockets.
    """

    def __init__(self, config: InfercoreConfig, engine_factory: str = DEFAULT_ENGINE_FACTORY,
                 endpoint: EngineEndpoint | None = None) -> None:
        self.config = config
        self.engine_factory = engine_factory
        self.endpoint = endpoint
        self.codec = WireCodec()
        if endpoint is None:
            self._dir: str | None = make_socket_dir()
            self.input_address = f"ipc://{self._dir}/input"
            self.output_address = f"ipc://{self._dir}/output"
        else:
            self._dir = None
            self.input_address, self.output_address = endpoint.input_address, endpoint.output_address
        self._prefix = endpoint.id_prefix if endpoint is not None else ""
        # The process's one context, never terminated here: a context collected together with its sockets (a
        # client left unclosed in a reference cycle) would wait in term() for sockets it can no longer close,
        # and hang whichever gc.collect() found it. Sockets drop unsent messages when closed (LINGER 0).
        self.ctx = zmq.asyncio.Context.instance()
        self.input = self.ctx.socket(zmq.PUSH)
        self.output = self.ctx.socket(zmq.PULL)
        for sock in (self.input, self.output):
            sock.setsockopt(zmq.LINGER, 0)
        self.input.bind(self.input_address)
        self.output.bind(self.output_address)
        self.process: multiprocessing.process.BaseProcess | None = None
        self.model_info: ModelInfo | None = None
        self.initial_stats: SchedulerStats | None = None
        self._closed = False

    def spawn(self) -> None:
        """Start the engine process now (unless the launcher starts it, or it runs already), without
        waiting for it: ``infercore serve`` calls this before its own imports so that both overlap."""
        if self.endpoint is not None or self.process is not None:
            return
        ctx = multiprocessing.get_context("spawn")
        self.process = ctx.Process(
            target=run_engine, name="infercore-engine-core", daemon=True,
            args=(self._dir, self.config.model_dump_json(), self.input_address, self.output_address,
                  os.getpid(), self.engine_factory),
        )
        self.process.start()

    async def start(self, timeout: float | None = None) -> ModelInfo:
        """Spawn the engine (unless the launcher did, or :meth:`spawn` has) and wait for its ready
        message; raise EngineStartupError with its reason."""
        self.spawn()
        receive = asyncio.ensure_future(self.output.recv_multipart())
        died = asyncio.ensure_future(self.wait_dead())
        done, _ = await asyncio.wait({receive, died}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if receive not in done:
            receive.cancel()
            died.cancel()
            code = self.process.exitcode if self.process is not None else None
            self.close()
            if not done:
                raise EngineStartupError(f"the engine did not start within {timeout} seconds")
            how = f" (exit code {code})" if code is not None else ""
            raise EngineStartupError(f"the engine process exited during startup{how}; see its log above")
        died.cancel()
        kind, message = self.codec.decode(receive.result())
        if kind is MessageKind.STARTUP_FAILED:
            self.close()
            raise EngineStartupError(message.message)
        if kind is not MessageKind.READY:
            self.close()
            raise EngineStartupError(f"the engine sent {kind.name} before it was ready")
        self.model_info = message.model_info
        self.initial_stats = message.stats
        return message.model_info

    async def wait_dead(self) -> int | None:
        """Return (the exit code, when the engine is this process's child) once the engine has ended."""
        if self.endpoint is not None:
            await wait_pid_exit(self.endpoint.engine_pid)
            return None
        assert self.process is not None
        loop = asyncio.get_running_loop()
        dead = loop.create_future()
        sentinel = self.process.sentinel
        loop.add_reader(sentinel, lambda: dead.done() or dead.set_result(None))
        try:
            await dead
        finally:
            loop.remove_reader(sentinel)
        self.process.join(timeout=1)
        return self.process.exitcode

    async def add_request(self, request: EngineCoreRequest) -> None:
        if self._prefix:
            request = msgspec.structs.replace(
                request, request_id=self._prefix + request.request_id,
                parent_id=None if request.parent_id is None else self._prefix + request.parent_id)
        await self.input.send_multipart(self.codec.encode(request))

    async def abort_requests(self, request_ids: list[str]) -> None:
        if request_ids:
            ids = [self._prefix + request_id for request_id in request_ids]
            await self.input.send_multipart(self.codec.encode(AbortRequests(ids)))

    async def get_outputs(self) -> EngineCoreOutputs:
        """The next batch of outputs; raises EngineDeadError if the engine reported a fatal error."""
        kind, message = self.codec.decode(await self.output.recv_multipart())
        if isinstance(message, EngineFailure):
            raise EngineDeadError(message.message)
        if kind is not MessageKind.OUTPUTS:
            raise EngineDeadError(f"unexpected {kind.name} message from the engine")
        if self._prefix:
            cut = len(self._prefix)
            for output in message.outputs:
                output.request_id = output.request_id[cut:]
        return message

    def close(self, timeout: float = 5.0) -> None:
        """Stop the engine this client started (SIGTERM, then SIGKILL after ``timeout``) and remove the
        sockets."""
        if self._closed:
            return
        self._closed = True
        if self.process is not None and self.process.is_alive():
            self.process.terminate()  # the engine exits cleanly on SIGTERM
            self.process.join(timeout)
            if self.process.is_alive():
                self.process.kill()
                self.process.join()
        self.input.close(linger=0)
        self.output.close(linger=0)
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)

