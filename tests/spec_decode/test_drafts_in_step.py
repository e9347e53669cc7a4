"""Drafts inside the verifying step (``ModelProposer.launch_drafts``), for an EAGLE-3 head and a draft
model: the catch-up as if every draft were accepted with the target's token written on the device, and the
one-token steps placed from the device's accepted counts, give the same drafts, step by step, as catching up
after the tokens reach the host (through chunked prefill, and for the draft model through steps that do not
draft); and the buffers behind the graphs take those device inputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from engine_cases import ENGINE_DEFAULTS
from test_draft_graph_buffers import BLOCK, _bind, _runner
from test_engine_ngram import ALL_PROMPTS

from infercore import LLM, SamplingParams
from infercore.benchmarks.speculative import force_acceptance_rate
from infercore.spec_decode.model_proposer import ModelProposer
from infercore.spec_decode.tiny_heads import build_eagle3_head_folder
from infercore.worker.draft_catch_up import CatchUpGraphs
from infercore.worker.draft_steps import DraftSteps
from infercore.worker.spec_decode_step import SpeculativeStep


def _drafts_of_every_step(folder: Path, spec: dict[str, Any], monkeypatch: pytest.MonkeyPatch, in_step: bool,
                          **engine_args: Any) -> tuple[list[list[list[int]]], list[list[int]]]:
    """Each step's drafts (batch order) and the outputs, at a forced acceptance rate of one half."""
    seen: list[list[list[int]]] = []
    original = SpeculativeStep.step_drafts

    def record(self: SpeculativeStep, batch: Any, pending: Any) -> list[list[int]]:
        drafts = original(self, batch, pending)
        seen.append(drafts)
        proposer = self.proposer
        if proposer.lazy_catch_up and any(drafts):  # the record of a drafting step ends where the tokens do
            for state in filter(batch.is_live, pending.states):
                assert proposer._valid_until[state.row] == batch.num_tokens[state.row] - proposer.input_shift
        return drafts

    with monkeypatch.context() as patch:
        patch.setattr(SpeculativeStep, "step_drafts", record)
        patch.setattr(ModelProposer, "drafts_in_step", in_step)
        llm = LLM(**{**ENGINE_DEFAULTS, "model": str(folder), **engine_args, "speculative_config": spec})
        force_acceptance_rate(llm, 0.5)
        torch.manual_seed(7)
        params = [SamplingParams(temperature=0, max_tokens=12 + 5 * (i % 4), ignore_eos=True) for i in range(6)]
        outputs = llm.generate(ALL_PROMPTS[:6], params, use_tqdm=False)
    return seen, [list(out.outputs[0].token_ids) for out in outputs]


@pytest.mark.parametrize("engine_args", [{}, {"max_num_batched_tokens": 16}], ids=["whole", "chunked"])
@pytest.mark.parametrize("method", ["eagle3", "draft_model"])
def test_drafts_in_step_equal_drafts_after_it(qwen3_folder, tiny_model_factory, tmp_path, monkeypatch, engine_args,
                                              method) -> None:
    if method == "eagle3":
        head = build_eagle3_head_folder(tmp_path / "head", qwen3_folder, draft_vocab_size=96)
        spec = {"method": "eagle3", "model": str(head), "num_speculative_tokens": 3}
    else:  # another architecture as the draft. Two requests at a time, and a step of two does not draft: a
        # request drafts alone, then beside a newcomer it does not (nor catch up: lazily), then drafts again.
        spec = {"method": "draft_model", "model": str(tiny_model_factory("LlamaForCausalLM", seed=1)),
                "num_speculative_tokens": 3, "disable_by_batch_size": 2}
        engine_args = {**engine_args, "max_num_seqs": 2}
    after, after_tokens = _drafts_of_every_step(qwen3_folder, spec, monkeypatch, False, **engine_args)
    inside, inside_tokens = _drafts_of_every_step(qwen3_folder, spec, monkeypatch, True, **engine_args)
    assert inside_tokens == after_tokens
    assert inside == after
    assert sum(len(d) for step in inside for d in step) > 20


@torch.inference_mode()
def test_draft_steps_place_rows_from_device_positions() -> None:
    """Positions on the device give the steps what the same positions from the host give."""
    table = np.arange(1, 1 + 4 * 8, dtype=np.int32).reshape(4, 8)
    rows, last_pos, counts = np.array([3, 1, 0]), np.array([6, 2, 9]), np.array([4, 2, 1])
    seen = []
    for given in (last_pos, torch.from_numpy(last_pos)):
        calls: list[tuple[list[int], list[int], list[int]]] = []

        def step(ids: torch.Tensor, pos: torch.Tensor, hidden: torch.Tensor, calls: list = calls) -> tuple:
            calls.append((pos.tolist(), [], []))
            return hidden + 1, ids + pos

        steps = DraftSteps(_runner(table), step, hidden_size=2, hidden_dtype=torch.float32, max_rows=4, max_steps=3)
        steps.capture()
        for size, (graph, out) in steps.graphs.items():  # a replay reruns the whole chain
            graph.rerun, graph.out = (lambda s=size, steps=steps: (steps._chain(s),)), (out,)
        calls.clear()
        out = steps.run(rows, given, counts, torch.tensor([10, 20, 30]), torch.zeros((3, 2)))
        calls[0] = (calls[0][0], steps.seq_lens.tolist(), steps.slots[0].tolist())  # the last step's metadata
        seen.append((out.tolist(), calls))
    assert seen[0] == seen[1]
    assert seen[1][0] == [[10, 17, 25, 34], [20, 23, -1, -1], [30, -1, -1, -1]]
    assert seen[1][1][0][2][:3] == [table[3, 2] * BLOCK + 1, -1, -1]  # after the last step


@torch.inference_mode()
def test_catch_up_replay_takes_last_tokens_and_inputs_from_the_device() -> None:
    table = np.arange(1, 1 + 3 * 8, dtype=np.int32).reshape(3, 8)
    seen: dict[str, torch.Tensor] = {}

    def fn(ids: torch.Tensor, pos: torch.Tensor, target_rows: torch.Tensor, last: torch.Tensor):
        seen.update(ids=ids.clone())
        return ids.index_select(0, last).float().unsqueeze(1), pos.index_select(0, last)

    graphs = CatchUpGraphs(_runner(table), fn, max_rows=4, max_tokens=16)
    graphs.capture()
    _bind(graphs, graphs._unpack_and_run)
    rows, query_lens, positions = np.array([2, 0]), np.array([1, 3]), np.array([5, 8, 9, 10])
    feed = (torch.tensor([2]), torch.tensor([99]))
    hidden, tokens = graphs.replay(8, rows, query_lens, np.array([6, 11]), positions, np.array([50, 60, 61, 62]),
                                   np.zeros(4, np.int64), np.array([0, 3]), torch.tensor([0, 2]), feed)
    assert seen["ids"][:4].tolist() == [50, 60, 99, 62]
    assert tokens.tolist() == [5, 9] and hidden[:, 0].tolist() == [50.0, 99.0]


def _drafts_by_request(folder: Path, spec: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
                       async_scheduling: bool, **engine_args: Any) -> dict[str, list[list[int]]]:
    """Every draft each request got, in order."""
    seen: dict[str, list[list[int]]] = {}
    original = SpeculativeStep.step_drafts

    def record(self: SpeculativeStep, batch: Any, pending: Any) -> list[list[int]]:
        drafts = original(self, batch, pending)
        for rid, ids in zip(pending.req_ids, drafts, strict=True):
            if ids:
                seen.setdefault(rid.split("-")[0], []).append(ids)
        return drafts

    with monkeypatch.context() as patch:
        patch.setattr(SpeculativeStep, "step_drafts", record)
        llm = LLM(**{**ENGINE_DEFAULTS, "model": str(folder), "speculative_config": spec,
                     "async_scheduling": async_scheduling, **engine_args})
        assert llm.llm_engine.engine_core.async_mode == async_scheduling
        params = [SamplingParams(temperature=0, max_tokens=8 * (i + 1), ignore_eos=True) for i in range(4)]
        llm.generate(ALL_PROMPTS[:4], params, use_tqdm=False)
    return seen


@pytest.mark.parametrize("engine_args", [{}, {"max_num_batched_tokens": 16}], ids=["whole", "chunked"])
def test_eagle_drafts_after_overlapped_steps_equal_those_of_synchronous_steps(qwen3_folder, tmp_path, monkeypatch,
                                                                              engine_args) -> None:
    """Steps of 3 requests or more carry no drafts and overlap: the next step's forward pass is queued before
    a step's tokens are collected. The head still catches up on each step's own hidden states (chunked: also
    in steps of prompt chunks alone), so once fewer requests run and drafting resumes, every request gets
    the drafts a synchronous run gives it."""
    head = build_eagle3_head_folder(tmp_path / "head", qwen3_folder, draft_vocab_size=96)
    spec = {"method": "eagle3", "model": str(head), "num_speculative_tokens": 3, "disable_by_batch_size": 3,
            "disable_by_acceptance": None}  # a random head's drafts fail: no pauses, every step compared
    synchronous = _drafts_by_request(qwen3_folder, spec, monkeypatch, False, **engine_args)
    overlapped = _drafts_by_request(qwen3_folder, spec, monkeypatch, True, **engine_args)
    assert overlapped.keys() == synchronous.keys()
    for rid, drafts in synchronous.items():
        # The first drafting step after overlapped ones may hold fewer lookahead slots: fewer drafts, same start.
        assert len(overlapped[rid]) == len(drafts), rid
        for got, want in zip(overlapped[rid], drafts, strict=True):
            n = min(len(got), len(want))
            assert got[:n] == want[:n], (rid, got, want)
    assert sum(len(d) for d in synchronous.values()) >= 10


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["synchronous", "overlapped"])
def test_a_catch_up_that_drafts_nothing_writes_the_cache_entries_of_the_whole_pass(qwen3_folder, tmp_path,
                                                                                  monkeypatch, async_scheduling) -> None:
    """Steps of 3 requests or more draft nothing, and the EAGLE head catches up through its K/V entries alone
    (``ModelProposer.write_kv``: no output projection, MLP or LM head); the drafts once drafting resumes are
    those of a head that ran its whole layer in those steps."""
    from infercore.spec_decode.eagle import EagleProposer

    head = build_eagle3_head_folder(tmp_path / "head", qwen3_folder, draft_vocab_size=96)
    spec = {"method": "eagle3", "model": str(head), "num_speculative_tokens": 3, "disable_by_batch_size": 3,
            "disable_by_acceptance": None}
    calls = []
    original = EagleProposer.write_kv

    def counted(self, *args):
        calls.append(len(args[0]))
        return original(self, *args)

    with monkeypatch.context() as patch:
        patch.setattr(EagleProposer, "write_kv", counted)
        alone = _drafts_by_request(qwen3_folder, spec, monkeypatch, async_scheduling)
    assert calls and max(calls) >= 3  # busy steps of 3-4 requests caught up through write_kv
    with monkeypatch.context() as patch:
        patch.setattr(EagleProposer, "writes_kv_alone", False)
        whole = _drafts_by_request(qwen3_folder, spec, monkeypatch, async_scheduling)
    assert alone == whole
    assert sum(len(d) for d in whole.values()) >= 10


@pytest.mark.parametrize("method", ["eagle3", "draft_model"])
def test_steps_that_draft_nothing_come_back_as_plain_samples(qwen3_folder, tiny_model_factory, tmp_path, monkeypatch,
                                                             method) -> None:
    """A step of ``disable_by_batch_size`` requests or more drafts nothing: its catch-up (EAGLE's K/V entries; a
    draft model's, lazily, none) is queued inside it and its tokens come back as one per row, the plain sampler's
    copy, with nothing left for the proposer when they arrive. Steps that draft still carry verified rows."""
    if method == "eagle3":
        model = build_eagle3_head_folder(tmp_path / "head", qwen3_folder, draft_vocab_size=96)
    else:
        model = tiny_model_factory("LlamaForCausalLM", seed=1)
    spec = {"method": method, "model": str(model), "num_speculative_tokens": 3, "disable_by_batch_size": 3,
            "disable_by_acceptance": None}
    steps: list[tuple[int, bool, bool, bool]] = []  # requests, plain sample, caught up, drafted
    original = SpeculativeStep.step_drafts

    def record(self: SpeculativeStep, batch: Any, pending: Any) -> list[list[int]]:
        drafts = original(self, batch, pending)
        if len(pending.states):
            steps.append((len(pending.req_ids), pending.verified is None, pending.caught_up, any(drafts)))
        return drafts

    with monkeypatch.context() as patch:
        patch.setattr(SpeculativeStep, "step_drafts", record)
        llm = LLM(**{**ENGINE_DEFAULTS, "model": str(qwen3_folder), "speculative_config": spec})
        params = [SamplingParams(temperature=0, max_tokens=8 * (i + 1), ignore_eos=True) for i in range(4)]
        llm.generate(ALL_PROMPTS[:4], params, use_tqdm=False)
    busy = [s for s in steps if s[0] >= 3]
    assert len(busy) >= 5
    assert all(plain and caught_up and not drafted for _, plain, caught_up, drafted in busy), busy
    drafting = [s for s in steps if s[3]]
    assert drafting and not any(plain for _, plain, _, _ in drafting)


def test_eagle3_drafts_in_step_under_tensor_parallelism(qwen3_folder, tmp_path) -> None:
    """Two tensor-parallel ranks (gloo), each drafting inside its verifying steps with a whole head (one that
    carries its own ``embed_tokens``, as the public heads do): the tokens of one rank without speculation."""
    from safetensors.torch import load_file, save_file

    head = build_eagle3_head_folder(tmp_path / "head", qwen3_folder, draft_vocab_size=96)
    weights = load_file(str(head / "model.safetensors"))
    weights["embed_tokens.weight"] = load_file(str(qwen3_folder / "model.safetensors"))["model.embed_tokens.weight"]
    save_file(weights, str(head / "model.safetensors"))
    params = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
    ref = LLM(**{**ENGINE_DEFAULTS, "model": str(qwen3_folder)}).generate(ALL_PROMPTS[:3], params, use_tqdm=False)
    llm = LLM(**{**ENGINE_DEFAULTS, "model": str(qwen3_folder), "tensor_parallel_size": 2,
                 "distributed_executor_backend": "mp",
                 "speculative_config": {"method": "eagle3", "model": str(head), "num_speculative_tokens": 3}})
    got = llm.generate(ALL_PROMPTS[:3], params, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in got] == [o.outputs[0].token_ids for o in ref]
    stats = llm.llm_engine.engine_core.scheduler.get_stats()
    assert stats.spec_num_draft_tokens > 0
    llm.shutdown()
