"""A request the engine cannot decode or cannot take fails alone: an error output for its id, while the
engine loop goes on serving everyone else."""

from __future__ import annotations

import os
import time

import msgspec
import pytest
import zmq

from infercore import SamplingParams
from infercore.engine.core_proc import EngineLoop
from infercore.engine.output_sender import OutputSender
from infercore.sampling_params import StructuredOutputsParams
from infercore.wire.codec import MessageKind, WireCodec, leading_request_id
from infercore.wire.messages import EngineCoreOutputs, EngineCoreRequest

GREEDY = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
PROMPT = [5, 17, 29, 41, 53, 65, 77]
DEPTH = 100_000


def _request(request_id: str, params: SamplingParams = GREEDY, prompt: list[int] = PROMPT) -> EngineCoreRequest:
    return EngineCoreRequest(request_id, prompt, params, arrival_time=time.time())


def _add_frames(request: EngineCoreRequest) -> list[bytes]:
    return WireCodec().encode(request)


def _choice_as_string(request_id: str) -> list[bytes]:
    """``structured_outputs.choice`` a string where the wire type is a list of strings."""
    fields = msgspec.msgpack.decode(_add_frames(_request(request_id))[1])
    fields[2]["structured_outputs"] = {"choice": "abc"}
    return [MessageKind.ADD.value, msgspec.msgpack.encode(fields)]


def _deeply_nested_schema(request_id: str) -> list[bytes]:
    """A JSON schema nested deeper than any decoder recurses ("maximum recursion depth exceeded")."""
    leaf = b"\x81\xa1a\xc0"  # {"a": None}
    params = SamplingParams(max_tokens=4, structured_outputs=StructuredOutputsParams(json={"a": None}))
    payload = _add_frames(_request(request_id, params))[1]
    assert payload.count(leaf) == 1
    return [MessageKind.ADD.value, payload.replace(leaf, b"\x81\xa1a" * DEPTH + b"\xc0")]


class Wire:
    """The API process's end of an engine loop, over in-process sockets."""

    def __init__(self, engine) -> None:
        self.ctx = zmq.Context()
        engine_in, self.to_engine = self.ctx.socket(zmq.PULL), self.ctx.socket(zmq.PUSH)
        engine_in.bind("inproc://engine-in")
        self.to_engine.connect("inproc://engine-in")
        self.from_engine, engine_out = self.ctx.socket(zmq.PULL), self.ctx.socket(zmq.PUSH)
        self.from_engine.bind("inproc://engine-out")
        engine_out.connect("inproc://engine-out")
        self.sender = OutputSender(engine_out)
        self.loop = EngineLoop(engine, engine_in, self.sender, os.getppid())
        self.sockets = [engine_in, engine_out, self.to_engine, self.from_engine]
        self.codec = WireCodec()
        self.tokens: dict[str, list[int]] = {}
        self.finished: dict[str, tuple[str, str | None]] = {}

    def send(self, frames: list[bytes]) -> None:
        self.to_engine.send_multipart(frames)

    def serve_until(self, done, max_iterations: int = 500) -> None:
        for _ in range(max_iterations):
            self.loop.run_once()
            while self.from_engine.poll(0):
                kind, outputs = self.codec.decode(self.from_engine.recv_multipart())
                assert kind is MessageKind.OUTPUTS and isinstance(outputs, EngineCoreOutputs)
                for out in outputs.outputs:
                    assert out.request_id not in self.finished, f"{out.request_id} got outputs after it finished"
                    self.tokens.setdefault(out.request_id, []).extend(out.new_token_ids)
                    if out.finished:
                        self.finished[out.request_id] = (str(out.finish_reason), out.error)
            if done():
                return
        raise AssertionError(f"not done after {max_iterations} loop iterations; finished: {self.finished}")

    def close(self) -> None:
        self.sender.close()
        for socket in self.sockets:
            socket.close(linger=0)
        self.ctx.term()


@pytest.fixture
def llm(make_llm):
    return make_llm(max_model_len=64)


@pytest.fixture
def wire(llm):
    wire = Wire(llm.llm_engine.engine_core)
    yield wire
    wire.close()


def test_leading_request_id_reads_only_the_id() -> None:
    for request_id in ["r", "x" * 31, "y" * 300, "é" * 40_000]:
        assert leading_request_id(_add_frames(_request(request_id))[1]) == request_id
    assert leading_request_id(_deeply_nested_schema("deep")[1]) == "deep"
    for garbage in [b"", b"\x94", b"\xc1", b"\x94\x07", b"\x94\xa5ab", b"\x94\xa2\xff\xfe"]:
        assert leading_request_id(garbage) is None


def test_bad_messages_fail_only_their_requests(llm, wire) -> None:
    reference = llm.generate([{"prompt_token_ids": PROMPT}], GREEDY, use_tqdm=False)[0].outputs[0].token_ids
    core = llm.llm_engine.engine_core
    wire.send(_add_frames(_request("good")))
    wire.serve_until(lambda: "good" in wire.tokens)
    too_long = SamplingParams(max_tokens=4, structured_outputs=StructuredOutputsParams(choice=["yes", "no"]))
    bad = {
        "choice-string": _choice_as_string("choice-string"),
        "deep-schema": _deeply_nested_schema("deep-schema"),
        "deep-json-string": _add_frames(_request("deep-json-string", SamplingParams(
            max_tokens=4, structured_outputs=StructuredOutputsParams(json="[" * DEPTH + "]" * DEPTH)))),
        "long-constrained": _add_frames(_request("long-constrained", too_long, list(range(3, 80)))),
    }
    for frames in bad.values():
        wire.send(frames)
    for frames in ([b"A", b"\xc1"], [b"?", b""], [MessageKind.ABORT.value, b"\x01"], [b"A"]):
        wire.send(frames)  # nothing to tell whose they are: dropped
    wire.send(_add_frames(_request("after")))
    wire.serve_until(lambda: {"good", "after", *bad} <= set(wire.finished))
    assert wire.finished["good"] == ("length", None)
    assert wire.tokens["good"] == reference
    assert wire.finished["after"] == ("length", None) and wire.tokens["after"] == reference
    for request_id in bad:
        reason, error = wire.finished[request_id]
        assert reason == "error" and error, request_id
        assert "Traceback" not in error and "/" not in error.split(":")[0], error
    assert "choice" in wire.finished["choice-string"][1]
    assert "recursion" in wire.finished["deep-schema"][1]
    assert "max_model_len" in wire.finished["long-constrained"][1]
    kv = core.scheduler.kv_cache_manager
    assert not core.has_unfinished_requests() and kv.num_free_blocks == kv.num_usable_blocks


def test_a_duplicate_id_leaves_the_running_request_alone(llm, wire) -> None:
    """The engine refuses a second request with an id in use (an error output for the id); the
    request already running keeps its own parameters."""
    core = llm.llm_engine.engine_core
    # Long enough that it is still running however many steps the loop takes before the duplicate.
    running = SamplingParams(temperature=0, max_tokens=48, ignore_eos=True)
    wire.send(_add_frames(_request("same", running)))
    wire.serve_until(lambda: "same" in wire.tokens)
    wire.send(_add_frames(_request("same", SamplingParams(max_tokens=5))))
    wire.loop.run_once()
    assert core.scheduler.requests["same"].max_tokens == running.max_tokens
    # Outputs of steps before the refusal may still be on their way from the engine's IO thread.
    refusal: list = []
    while not refusal and wire.from_engine.poll(2000):
        _, outputs = wire.codec.decode(wire.from_engine.recv_multipart())
        refusal = [o for o in outputs.outputs if o.error]
    assert len(refusal) == 1 and "already in use" in refusal[0].error
