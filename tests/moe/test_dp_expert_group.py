"""Expert parallelism across data-parallel engines, in one process: the configuration it implies, the
rendezvous port, layers built for a DP×TP group holding disjoint experts, and the dummy step leaving
the KV cache alone."""

from __future__ import annotations

import pytest
import torch
from moe_cases import ENGINE_ARGS, MOE_CASES

from infercore import LLM, SamplingParams
from infercore.config import ConfigError, InfercoreConfig
from infercore.distributed.dp_rendezvous import spans_data_parallel, with_data_parallel_master
from infercore.layers.expert_parallel_group import ExpertParallelGroup, get_ep_group, set_ep_group
from infercore.layers.fused_moe import FusedMoE, building_with_expert_parallel
from infercore.layers.tensor_parallel import set_tp_state
from infercore.wire.scheduler_output import CachedRequests, SchedulerOutput
from infercore.worker.dummy_step import run_dummy_step


def test_dp_with_ep_steps_one_at_a_time_without_graphs() -> None:
    config = InfercoreConfig.from_kwargs(data_parallel_size=2, enable_expert_parallel=True, async_scheduling=True)
    assert spans_data_parallel(config.parallel)
    assert config.model.enforce_eager and config.scheduler.async_scheduling is False
    plain = InfercoreConfig.from_kwargs(data_parallel_size=2)
    assert not spans_data_parallel(plain.parallel) and not plain.model.enforce_eager


def test_dp_with_ep_refuses_speculative_decoding() -> None:
    with pytest.raises(ConfigError, match="speculative decoding is not supported with expert parallelism"):
        InfercoreConfig.from_kwargs(data_parallel_size=2, enable_expert_parallel=True,
                                    speculative_config={"method": "ngram", "num_speculative_tokens": 3})


def test_the_launcher_chooses_a_rendezvous_port_only_when_engines_meet() -> None:
    config = InfercoreConfig.from_kwargs(data_parallel_size=2, enable_expert_parallel=True)
    chosen = with_data_parallel_master(config)
    assert chosen is not config and config.parallel.data_parallel_master_port is None
    assert chosen.parallel.data_parallel_master_port is not None
    assert with_data_parallel_master(chosen) is chosen  # a port set (by the user) is kept
    for alone in (InfercoreConfig.from_kwargs(enable_expert_parallel=True), InfercoreConfig.from_kwargs(data_parallel_size=2)):
        assert with_data_parallel_master(alone) is alone


@pytest.fixture
def ep_group():
    """``ep_group(rank, size)`` makes this process rank ``rank`` of a DP×TP expert-parallel group (one
    tensor-parallel rank); both groups reset afterwards."""
    yield lambda rank, size: set_ep_group(ExpertParallelGroup(rank, size, backend=object()))
    set_ep_group(None)
    set_tp_state(0, 1)


def test_the_ep_group_defaults_to_the_tensor_parallel_group(ep_group) -> None:
    set_tp_state(1, 2)
    assert (get_ep_group().rank, get_ep_group().size, get_ep_group().spans_engines) == (1, 2, False)
    ep_group(3, 4)
    assert (get_ep_group().rank, get_ep_group().size, get_ep_group().spans_engines) == (3, 4, True)


def test_layers_built_for_four_engines_hold_disjoint_experts(ep_group) -> None:
    held = []
    for rank in range(4):
        ep_group(rank, 4)
        with building_with_expert_parallel(True):
            layer = FusedMoE(8, 2, 8, 6, renormalize=True, prefix="mlp.experts")
        assert layer.ep_rank == rank and layer.tp_size == 1
        assert layer.dispatcher is not None and layer.dispatcher.group is get_ep_group()
        assert layer.w2_weight.shape[0] == len(layer.local_expert_ids) == 2
        held.append(set(layer.local_expert_ids))
    assert set().union(*held) == set(range(8)) and sum(map(len, held)) == 8


def test_the_dummy_step_writes_no_kv_cache(tiny_model_factory, monkeypatch) -> None:
    architecture, overrides = MOE_CASES["qwen3-moe"]
    llm = LLM(model=str(tiny_model_factory(architecture, **overrides)), **ENGINE_ARGS)
    try:
        params = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
        first = llm.generate(["hello world"], params, use_tqdm=False)[0].outputs[0].token_ids
        runner = llm.llm_engine.engine_core.executor.runner
        before = [cache.clone() for cache in runner.kv_caches]
        run_dummy_step(runner)
        assert all(torch.equal(a, b) for a, b in zip(before, runner.kv_caches, strict=True))
        assert llm.generate(["hello world"], params, use_tqdm=False)[0].outputs[0].token_ids == first
        # In lockstep, a worker given a step with nothing scheduled runs the dummy forward pass.
        worker = llm.llm_engine.engine_core.executor.worker
        ran: list[object] = []
        monkeypatch.setattr("infercore.worker.worker.run_dummy_step", ran.append)
        worker.execute_model(SchedulerOutput([], CachedRequests(), [], 0, set()))
        assert ran == []
        worker.lockstep = True
        worker.execute_model(SchedulerOutput([], CachedRequests(), [], 0, set()))
        assert ran == [runner]
    finally:
        llm.llm_engine.engine_core.shutdown()
