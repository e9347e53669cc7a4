"""The worker RPC codec: calls and replies round-trip into the types the worker method declares."""

from __future__ import annotations

import pytest
import torch

from infercore.distributed.rpc_codec import (
    decode_args,
    decode_call,
    decode_reply,
    decode_value,
    dispatch,
    encode_call,
    encode_reply,
)
from infercore.sampling_params import SamplingParams
from infercore.wire.messages import Logprobs
from infercore.wire.scheduler_output import (
    CachedRequests,
    ModelRunnerOutput,
    NewRequestData,
    SchedulerOutput,
)
from infercore.worker.worker import RPC_METHODS, Worker


def _scheduler_output() -> SchedulerOutput:
    new = NewRequestData("a", [1, 2, 3], SamplingParams(temperature=0.5, seed=7, max_tokens=4), [1, 2], 0)
    cached = CachedRequests(["b", "e"], [9, 4], [1], [0, 2], [5, 6])
    return SchedulerOutput([new], cached, [1, 2, 3], 6, {"c", "d"})


def test_execute_model_arguments_round_trip_typed() -> None:
    so = _scheduler_output()
    bitmask = torch.tensor([[1, -1], [0, 3]], dtype=torch.int32)
    call = decode_call(encode_call("execute_model", (so, bitmask)))
    got_so, got_mask = decode_args(Worker, call)
    assert got_so == so
    assert isinstance(got_so.scheduled_new_reqs[0].sampling_params, SamplingParams)
    assert got_so.finished_req_ids == {"c", "d"}
    assert got_so.req_ids == ["b", "e", "a"] and list(got_so.scheduled_cached_reqs.new_blocks()) == [(1, [5, 6])]
    assert got_mask.dtype == torch.int32 and torch.equal(got_mask, bitmask)


def test_optional_arguments_may_be_left_out() -> None:
    call = decode_call(encode_call("execute_model", (_scheduler_output(),)))
    assert len(decode_args(Worker, call)) == 1


def test_reply_value_decodes_into_the_return_type() -> None:
    output = ModelRunnerOutput(["a"], [[4]], {"a": Logprobs([[4, 1]], [[-0.1, -2.0]], [1])}, None)
    reply = decode_reply(encode_reply(0, output))
    assert decode_value(Worker, "execute_model", reply) == output
    assert decode_value(Worker, "determine_num_blocks", decode_reply(encode_reply(1, 12))) == 12


def test_only_worker_methods_are_callable() -> None:
    call = decode_call(encode_call("__init__", ()))
    with pytest.raises(ValueError, match="do not offer"):
        dispatch(object(), RPC_METHODS.__contains__, call)


def test_errors_travel_as_text() -> None:
    reply = decode_reply(encode_reply(1, error="ValueError: bad"))
    assert (reply.rank, reply.error) == (1, "ValueError: bad")
