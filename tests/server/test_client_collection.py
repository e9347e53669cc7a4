"""An engine client nobody closed, caught in a reference cycle, is collected without hanging the process: a zmq
context collected together with its sockets would wait in ``term()`` for sockets the collector had already cut
loose, and every later ``gc.collect()`` (the engine's start-up heap freeze, or Python's own) would never return."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

_UNCLOSED = """
import asyncio, gc, warnings
warnings.simplefilter("ignore", ResourceWarning)
from infercore.config import InfercoreConfig
from infercore.frontend.core_client import EngineCoreClient

for round in range(3):
    client = EngineCoreClient(InfercoreConfig(), "fake_engine:EchoEngine")  # the wire tests' echo engine
    client.owner = client  # a reference cycle, as an owner and its tasks make
    if round == 2:  # one with its engine started and a message sent to it
        asyncio.run(client.start(timeout=120))
        asyncio.run(client.abort_requests(["never-sent"]))
        engine = client.process
    del client
    gc.collect()
engine.terminate()
engine.join(10)
print("collected", flush=True)
"""


def test_an_unclosed_client_in_a_reference_cycle_does_not_hang_the_collector() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}
    done = subprocess.run([sys.executable, "-c", _UNCLOSED], capture_output=True, text=True, timeout=60, env=env,
                          check=False)
    assert done.returncode == 0 and "collected" in done.stdout, done.stderr[-2000:]
