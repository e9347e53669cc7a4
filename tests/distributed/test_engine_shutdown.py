"""Engines created one after another in one process each release their workers: ``LLM.shutdown()``, a
``with LLM(...)`` block and garbage collection all end the worker processes (mp) or actors and placement
groups (Ray), so the next engine finds the resources free."""

from __future__ import annotations

import gc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from distributed_cases import ENGINE_ARGS, GREEDY

from infercore import LLM

TP2: dict[str, Any] = {**ENGINE_ARGS, "tensor_parallel_size": 2}


def _held(llm: LLM) -> Any:
    """The engine's executor, with the worker processes it holds now (it forgets them on shutdown)."""
    executor = llm.llm_engine.engine_core.executor
    executor.held_procs = list(getattr(executor, "procs", []))
    return executor


def _by_shutdown(model: Path, **args: Any) -> Any:
    llm = LLM(model=str(model), **args)
    llm.generate(["hello"], GREEDY, use_tqdm=False)
    executor = _held(llm)
    llm.shutdown()
    llm.shutdown()  # a second call does nothing
    return executor


def _by_with_block(model: Path, **args: Any) -> Any:
    with LLM(model=str(model), **args) as llm:
        llm.generate(["hello"], GREEDY, use_tqdm=False)
        executor = _held(llm)
    return executor


def _by_collection(model: Path, **args: Any) -> Any:
    llm = LLM(model=str(model), **args)
    llm.generate(["hello"], GREEDY, use_tqdm=False)
    executor = _held(llm)
    del llm
    gc.collect()
    return executor


ENDINGS: list[Callable[..., Any]] = [_by_shutdown, _by_with_block, _by_collection]


def test_three_mp_engines_one_after_another(tiny_model_factory) -> None:
    model = tiny_model_factory("Qwen3ForCausalLM")
    for end in ENDINGS:
        procs = end(model, **TP2, distributed_executor_backend="mp").held_procs
        assert len(procs) == 2 and all(p.poll() is not None for p in procs), f"{end.__name__}: workers still run"


@pytest.fixture
def ray_cluster():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_three_ray_engines_one_after_another(ray_cluster, tiny_model_factory) -> None:
    """The cluster has two CPUs: the second engine can place its two workers only if the first freed them."""
    from ray.util import placement_group_table

    model = tiny_model_factory("Qwen3ForCausalLM")
    for end in ENDINGS:
        executor = end(model, **TP2, distributed_executor_backend="ray")
        assert executor.actors == [] and executor.placement_group is None, end.__name__
        live = [g for g in placement_group_table().values() if g["state"] != "REMOVED"]
        assert live == [], f"{end.__name__}: placement groups left: {live}"
