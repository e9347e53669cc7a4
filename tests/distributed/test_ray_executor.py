"""The ``ray`` executor on a local Ray cluster the test starts: the same tokens as one device, and a
killed worker fails the engine quickly instead of hanging it."""

from __future__ import annotations

import os
import signal
import time

import pytest
from distributed_cases import ENGINE_ARGS, greedy_tokens

from infercore import LLM, SamplingParams
from infercore.executor.base import ExecutorDeadError

ray = pytest.importorskip("ray", reason="the ray executor needs Ray (pip install 'infercore[ray]')")


@pytest.fixture(scope="module")
def ray_cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_tp2_on_ray_matches_tp1(ray_cluster, tiny_model_factory) -> None:
    model = tiny_model_factory("Qwen3ForCausalLM")
    expected = greedy_tokens(model)
    assert greedy_tokens(model, tensor_parallel_size=2, distributed_executor_backend="ray") == expected


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_killed_ray_worker_fails_the_engine(ray_cluster, tiny_model_factory) -> None:
    llm = LLM(model=str(tiny_model_factory("Qwen3ForCausalLM")), tensor_parallel_size=2,
              distributed_executor_backend="ray", **ENGINE_ARGS)
    engine, core = llm.llm_engine, llm.llm_engine.engine_core
    pids = core.executor.collective_rpc("get_pid")
    engine.add_request("r", "hello world", SamplingParams(temperature=0, max_tokens=100, ignore_eos=True))
    engine.step()
    os.kill(pids[1], signal.SIGKILL)
    started = time.monotonic()
    with pytest.raises(ExecutorDeadError):
        for _ in range(100):
            engine.step()
    assert time.monotonic() - started < 10
    core.shutdown()
    deadline = time.monotonic() + 30
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_alive(p) for p in pids)
