"""The worker process of the ``mp`` executor: read calls from the broadcast queue, answer on its own.

Started as ``python -m infercore.executor.worker_proc`` with its launch spec (msgpack) on stdin. It
dies with its parent (``PR_SET_PDEATHSIG`` on Linux; elsewhere it notices within a second while
idle), so killing the engine never leaves a worker behind.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys

import msgspec

from infercore.config import InfercoreConfig
from infercore.distributed.rpc_codec import decode_call, dispatch, encode_reply
from infercore.distributed.shm_queue import QueueTimeout, ShmQueue
from infercore.wire.model_info import ModelInfo

logger = logging.getLogger("infercore.worker")

SHUTDOWN = "shutdown"
#: How often an idle worker looks up whether its parent is still there.
_IDLE_POLL_S = 1.0


class WorkerLaunch(msgspec.Struct, array_like=True):
    """Everything a worker process needs to start."""

    config_json: str
    model_info: ModelInfo
    max_num_batched_tokens: int
    rank: int
    world_size: int
    device_index: int
    init_method: str
    broadcast_queue: str
    reply_queue: str
    parent_pid: int


def die_with_parent() -> None:
    """Ask the kernel to kill this process when its parent exits (Linux only; a no-op elsewhere)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)


def _message(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}"[:2000]


def serve_worker(launch: WorkerLaunch) -> int:
    """Build the worker, report ready (or why not), then answer calls until told to stop."""
    from infercore.worker.worker import RPC_METHODS, Worker

    calls = ShmQueue.attach(launch.broadcast_queue, reader_index=launch.rank)
    replies = ShmQueue.attach(launch.reply_queue)

    def parent_alive() -> bool:
        return os.getppid() == launch.parent_pid

    try:
        config = InfercoreConfig.model_validate_json(launch.config_json)
        worker = Worker(config, launch.model_info, launch.max_num_batched_tokens, rank=launch.rank,
                        world_size=launch.world_size, device_index=launch.device_index,
                        init_method=launch.init_method)
    except Exception as exc:
        logger.exception("worker %d failed to start", launch.rank)
        replies.write(encode_reply(launch.rank, error=_message(exc)))
        return 1
    replies.write(encode_reply(launch.rank, os.getpid()))
    timeout = config.parallel.worker_timeout
    while True:
        try:
            data = calls.read(timeout=_IDLE_POLL_S)
        except QueueTimeout:
            if not parent_alive():
                return 1
            continue
        call = decode_call(data)
        if call.method == SHUTDOWN:
            worker.shutdown()
            return 0
        try:
            reply = encode_reply(launch.rank, dispatch(worker, RPC_METHODS.__contains__, call))
        except Exception as exc:
            logger.exception("worker %d failed in %s", launch.rank, call.method)
            reply = encode_reply(launch.rank, error=_message(exc))
        try:
            replies.write(reply, timeout=timeout, still_alive=parent_alive)
        except QueueTimeout:
            return 1


def main() -> None:
    """Process entry point."""
    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the server, which stops the engine
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    launch = msgspec.msgpack.decode(sys.stdin.buffer.read(), type=WorkerLaunch)
    sys.exit(serve_worker(launch))


if __name__ == "__main__":
    main()
