"""The engine wire: typed msgpack frames only (no pickle), startup handshake and errors, ipc sockets."""

from __future__ import annotations

import ast
import asyncio
import multiprocessing
import os
import pathlib
import stat
import tempfile

import msgspec
import pytest
import zmq

import infercore.engine.core_proc as core_proc
import infercore.frontend.core_client as core_client
import infercore.wire.codec as serial
from infercore.config import InfercoreConfig
from infercore.frontend.core_client import EngineCoreClient, EngineStartupError
from infercore.sampling_params import SamplingParams
from infercore.wire.codec import AbortRequests, MessageKind, WireCodec
from infercore.wire.messages import EngineCoreOutputs, EngineCoreRequest

WIRE_MODULES = [serial, core_proc, core_client]


def _request(request_id: str, tokens: list[int]) -> EngineCoreRequest:
    return EngineCoreRequest(request_id, tokens, SamplingParams(max_tokens=len(tokens)), arrival_time=0.0)


@pytest.mark.parametrize("module", WIRE_MODULES, ids=lambda m: m.__name__)
def test_no_pickle_in_wire_modules(module) -> None:
    tree = ast.parse(pathlib.Path(module.__file__).read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                for alias in node.names} | {node.module.split(".")[0] for node in ast.walk(tree)
                                            if isinstance(node, ast.ImportFrom) and node.module}
    assert not imported & {"pickle", "dill", "cloudpickle", "marshal", "shelve"}
    called = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    assert not called & {"recv_pyobj", "send_pyobj", "recv_serialized", "send_serialized"}


#: Modules that turn bytes back into Python objects (a peer sending such bytes could run code in the receiver).
UNPICKLING_MODULES = {"pickle", "dill", "cloudpickle", "marshal", "shelve", "joblib"}


def test_no_module_of_the_engine_or_its_plugins_unpickles() -> None:
    """Across core and every plugin in the tree, not only the wire's modules: none imports an unpickling
    module or calls a zmq ``*_pyobj``, and every ``torch.load`` passes ``weights_only=True``."""
    root = pathlib.Path(__file__).resolve().parents[2]
    files = sorted((root / "core" / "infercore").rglob("*.py")) + sorted((root / "plugins").rglob("*.py"))
    assert len(files) > 100
    offenders = []
    for path in files:
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(name.split(".")[0] in UNPICKLING_MODULES for name in names):
                offenders.append(f"{path.relative_to(root)}:{node.lineno} imports {names}")
            if isinstance(node, ast.Attribute) and node.attr in {"recv_pyobj", "send_pyobj"}:
                offenders.append(f"{path.relative_to(root)}:{node.lineno} uses {node.attr}")
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "load"
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"
                    and not any(kw.arg == "weights_only" and isinstance(kw.value, ast.Constant) and kw.value.value is True
                                for kw in node.keywords)):
                offenders.append(f"{path.relative_to(root)}:{node.lineno} calls torch.load without weights_only=True")
    assert not offenders, offenders


def test_codec_roundtrip_and_rejects_garbage() -> None:
    codec = WireCodec()
    request = _request("r1", [1, 2, 3])
    kind, decoded = codec.decode(codec.encode(request))
    assert kind is MessageKind.ADD and decoded == request
    kind, decoded = codec.decode(codec.encode(AbortRequests(["a", "b"])))
    assert decoded.request_ids == ["a", "b"]
    with pytest.raises(ValueError):
        codec.decode([b"?", b"\x90"])
    with pytest.raises(ValueError):
        codec.decode([b"A"])
    with pytest.raises(msgspec.ValidationError):
        codec.decode([MessageKind.ADD.value, msgspec.msgpack.encode({"x": 1})])


def test_engine_process_payloads_are_msgpack() -> None:
    """Drive the engine process over raw sockets and check every frame it sends is plain msgpack."""
    folder = tempfile.mkdtemp()
    ctx = zmq.Context()
    to_engine, from_engine = ctx.socket(zmq.PUSH), ctx.socket(zmq.PULL)
    to_engine.bind(f"ipc://{folder}/in")
    from_engine.bind(f"ipc://{folder}/out")
    proc = multiprocessing.get_context("spawn").Process(
        target=core_proc.run_engine_core,
        args=(InfercoreConfig().model_dump_json(), f"ipc://{folder}/in", f"ipc://{folder}/out", os.getpid(),
              "fake_engine:EchoEngine"), daemon=True)
    proc.start()
    try:
        assert from_engine.poll(60_000)
        frames = from_engine.recv_multipart()
        assert frames[0] == MessageKind.READY.value and not frames[1].startswith(b"\x80")
        assert isinstance(msgspec.msgpack.decode(frames[1]), list)
        to_engine.send_multipart(WireCodec().encode(_request("r", [4, 5, 6])))
        tokens: list[int] = []
        while len(tokens) < 3:
            assert from_engine.poll(10_000)
            kind, payload = from_engine.recv_multipart()
            assert kind == MessageKind.OUTPUTS.value
            msgspec.msgpack.decode(payload)  # untyped: plain msgpack
            outputs = msgspec.msgpack.decode(payload, type=EngineCoreOutputs)
            tokens += [t for o in outputs.outputs for t in o.new_token_ids]
        assert tokens == [4, 5, 6]
    finally:
        proc.terminate()
        proc.join(10)
        ctx.destroy(linger=0)


def test_client_sockets_are_private_ipc_and_startup_errors_surface() -> None:
    async def run() -> None:
        client = EngineCoreClient(InfercoreConfig(), "fake_engine:BrokenEngine")
        assert client.input_address.startswith("ipc://")
        folder = client.input_address[len("ipc://"):].rsplit("/", 1)[0]
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
        with pytest.raises(EngineStartupError, match="lower --max-model-len"):
            await client.start(timeout=60)
        assert not os.path.exists(folder)

    asyncio.run(run())
