"""An API server's client of an engine the launcher started: it tags request ids with its prefix on the
wire and removes it from outputs, and it notices the engine's end although the engine is not its child."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import zmq

from infercore.config import InfercoreConfig
from infercore.frontend.core_client import EngineCoreClient, EngineEndpoint, wait_pid_exit
from infercore.sampling_params import SamplingParams
from infercore.wire.codec import AbortRequests, EngineReady, WireCodec
from infercore.wire.messages import EngineCoreOutput, EngineCoreOutputs, EngineCoreRequest
from infercore.wire.model_info import ModelInfo


def _model_info() -> ModelInfo:
    return ModelInfo(max_model_len=64, vocab_size=100, eos_token_id=None, generation_stop_ids=[])


async def _exchange(folder: Path, engine_pid: int) -> tuple[list, list[str]]:
    endpoint = EngineEndpoint(f"ipc://{folder}/in", f"ipc://{folder}/out", engine_pid, "3:")
    client = EngineCoreClient(InfercoreConfig(), endpoint=endpoint)
    ctx, codec = zmq.Context(), WireCodec()
    engine_in, engine_out = ctx.socket(zmq.PULL), ctx.socket(zmq.PUSH)
    engine_in.connect(endpoint.input_address)
    engine_out.connect(endpoint.output_address)
    try:
        engine_out.send_multipart(codec.encode(EngineReady(model_info=_model_info(), pid=engine_pid)))
        await client.start(timeout=10)
        request = EngineCoreRequest("cmpl-1-0", [1, 2], SamplingParams(max_tokens=2), 0.0, parent_id="cmpl-1")
        await client.add_request(request)
        await client.abort_requests(["cmpl-1-0"])
        sent = [codec.decode(engine_in.recv_multipart())[1] for _ in range(2)]
        engine_out.send_multipart(codec.encode(EngineCoreOutputs(outputs=[EngineCoreOutput("3:cmpl-1-0", [7])])))
        outputs = await client.get_outputs()
        return sent, [o.request_id for o in outputs.outputs]
    finally:
        client.close()
        engine_in.close(linger=0)
        engine_out.close(linger=0)
        ctx.term()


def test_request_ids_carry_the_servers_prefix_on_the_wire_only(tmp_path: Path) -> None:
    sent, received = asyncio.run(_exchange(tmp_path, engine_pid=1))
    added, aborted = sent
    assert (added.request_id, added.parent_id) == ("3:cmpl-1-0", "3:cmpl-1")
    assert isinstance(aborted, AbortRequests) and aborted.request_ids == ["3:cmpl-1-0"]
    assert received == ["cmpl-1-0"]


def test_the_end_of_a_process_that_is_not_a_child_is_noticed() -> None:
    # A grandchild: its parent exits at once, so this process cannot wait for it as a child.
    spawner = subprocess.run([sys.executable, "-c", "import subprocess, sys; print(subprocess.Popen("
                              "[sys.executable, '-c', 'import time; time.sleep(0.5)']).pid)"],
                             capture_output=True, text=True, check=True)
    pid = int(spawner.stdout)

    async def wait() -> float:
        loop = asyncio.get_running_loop()
        start = loop.time()
        await asyncio.wait_for(wait_pid_exit(pid), 10)
        return loop.time() - start

    assert asyncio.run(wait()) < 5
