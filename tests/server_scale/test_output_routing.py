"""The engine loop with several API servers: it reads every input socket, each request's outputs go only
to the API server that sent it, stats go to all (on their own at most every stats interval, and always
once the engine goes idle), and a route is dropped when its request finishes or is aborted."""

from __future__ import annotations

import os

import zmq

from infercore.engine.core_proc import EngineLoop
from infercore.engine.output_sender import OutputSender
from infercore.sampling_params import SamplingParams
from infercore.wire.codec import AbortRequests, MessageKind, WireCodec
from infercore.wire.messages import EngineCoreOutput, EngineCoreOutputs, EngineCoreRequest, SchedulerStats

CLIENTS = 3


class ScriptedEngine:
    """Each request runs ``steps`` steps, one token per step; the last step finishes it."""

    def __init__(self, steps: int = 3) -> None:
        self.steps = steps
        self.running: dict[str, int] = {}
        self.aborted: list[str] = []

    def add_request(self, request: EngineCoreRequest) -> None:
        self.running[request.request_id] = 0

    def abort_requests(self, request_ids: list[str]) -> None:
        self.aborted += request_ids
        for request_id in request_ids:
            self.running.pop(request_id, None)

    def has_unfinished_requests(self) -> bool:
        return bool(self.running)

    def step(self) -> EngineCoreOutputs:
        outputs = []
        for request_id in list(self.running):
            self.running[request_id] += 1
            done = self.running[request_id] == self.steps
            outputs.append(EngineCoreOutput(request_id, [self.running[request_id]],
                                            finish_reason=1 if done else None))
            if done:
                del self.running[request_id]
        return EngineCoreOutputs(outputs=outputs, stats=SchedulerStats(num_running=len(self.running)))


class Wires:
    """CLIENTS API-server ends of an engine loop over in-process sockets."""

    def __init__(self, engine: ScriptedEngine, stats_interval_s: float = 0.0) -> None:
        self.ctx = zmq.Context()
        self.codec = WireCodec()
        inputs, outputs, self.to_engine, self.from_engine = [], [], [], []
        for i in range(CLIENTS):
            engine_in, to_engine = self.ctx.socket(zmq.PULL), self.ctx.socket(zmq.PUSH)
            engine_in.bind(f"inproc://in-{i}")
            to_engine.connect(f"inproc://in-{i}")
            from_engine, engine_out = self.ctx.socket(zmq.PULL), self.ctx.socket(zmq.PUSH)
            from_engine.bind(f"inproc://out-{i}")
            engine_out.connect(f"inproc://out-{i}")
            inputs.append(engine_in)
            outputs.append(engine_out)
            self.to_engine.append(to_engine)
            self.from_engine.append(from_engine)
        self.sender = OutputSender(*outputs, stats_interval_s=stats_interval_s)
        self.loop = EngineLoop(engine, inputs, self.sender, os.getppid())
        self.sockets = inputs + outputs + self.to_engine + self.from_engine

    def add(self, client: int, request_id: str) -> None:
        request = EngineCoreRequest(request_id, [1, 2], SamplingParams(max_tokens=3), 0.0)
        self.to_engine[client].send_multipart(self.codec.encode(request))

    def received(self, client: int) -> list[EngineCoreOutputs]:
        batches = []
        while self.from_engine[client].poll(200):
            kind, batch = self.codec.decode(self.from_engine[client].recv_multipart())
            assert kind is MessageKind.OUTPUTS
            batches.append(batch)
        return batches

    def close(self) -> None:
        self.sender.close()
        for socket in self.sockets:
            socket.close(linger=0)
        self.ctx.term()


def _tokens(batches: list[EngineCoreOutputs]) -> dict[str, list[int]]:
    tokens: dict[str, list[int]] = {}
    for batch in batches:
        for output in batch.outputs:
            tokens.setdefault(output.request_id, []).extend(output.new_token_ids)
    return tokens


def test_each_request_is_answered_to_its_own_api_server_and_stats_reach_all() -> None:
    wires = Wires(ScriptedEngine())
    try:
        wires.add(0, "0:a")
        wires.add(2, "2:a")
        wires.add(2, "2:b")
        for _ in range(4):
            wires.loop.run_once()
        received = [wires.received(client) for client in range(CLIENTS)]
        assert _tokens(received[0]) == {"0:a": [1, 2, 3]}
        assert _tokens(received[1]) == {}
        assert _tokens(received[2]) == {"2:a": [1, 2, 3], "2:b": [1, 2, 3]}
        # Every step's stats (three steps, then the idle one that reports the emptied queues) reached
        # every API server, the one with no requests included.
        assert [len(batches) for batches in received] == [4, 4, 4]
        assert [batch.stats.num_running for batch in received[1]] == [3, 3, 0, 0]
        assert all(batch.stats is not None for batches in received for batch in batches)
        assert wires.sender.num_routes == 0, "finished requests keep their routes"
    finally:
        wires.close()


def test_stats_alone_are_spaced_out_but_the_idle_report_reaches_every_api_server() -> None:
    wires = Wires(ScriptedEngine(), stats_interval_s=60.0)
    try:
        wires.add(0, "0:a")
        for _ in range(4):
            wires.loop.run_once()
        received = [wires.received(client) for client in range(CLIENTS)]
        assert _tokens(received[0]) == {"0:a": [1, 2, 3]}
        # The API server with outputs has stats with each batch of them, then the idle report.
        assert [batch.stats.num_running for batch in received[0]] == [1, 1, 0, 0]
        # The others: the first step's stats, nothing while the interval runs, then the idle report.
        for client in (1, 2):
            assert [(len(batch.outputs), batch.stats.num_running) for batch in received[client]] == [(0, 1), (0, 0)]
    finally:
        wires.close()


def test_an_aborted_request_loses_its_route() -> None:
    engine = ScriptedEngine(steps=100)
    wires = Wires(engine)
    try:
        wires.add(1, "1:a")
        wires.loop.run_once()
        wires.to_engine[1].send_multipart(wires.codec.encode(AbortRequests(["1:a"])))
        wires.loop.run_once()
        assert engine.aborted == ["1:a"]
        assert _tokens(wires.received(1)) == {"1:a": [1]}
        assert wires.sender.num_routes == 0, "an aborted request keeps its route"
    finally:
        wires.close()


def test_an_undecodable_request_is_refused_to_the_api_server_that_sent_it() -> None:
    wires = Wires(ScriptedEngine())
    try:
        frames = wires.codec.encode(EngineCoreRequest("1:bad", [1], SamplingParams(max_tokens=3), 0.0))
        wires.to_engine[1].send_multipart([frames[0], frames[1][:-3]])
        wires.loop.run_once()
        [batch] = wires.received(1)
        [output] = batch.outputs
        assert output.request_id == "1:bad" and output.error
        assert wires.received(0) == [] and wires.received(2) == []
    finally:
        wires.close()
