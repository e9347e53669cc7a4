"""Pure-decode steps lay every input out in one arena and copy it in one transfer.

``StepBuffers`` is tested on its own with separate host and device tensors (the copies a GPU makes);
the engine test pads decode steps to graph sizes through a stand-in for the decode graphs (no device
graphs here) that reads the bound decode layout, and checks the tokens against unpadded steps, with
and without async scheduling (whose in-flight tokens are patched into the arena's input ids).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from decode_graph_stand_in import DecodeGraphStandIn
from engine_cases import ENGINE_DEFAULTS, PROMPTS

from infercore import LLM, SamplingParams
from infercore.worker.step_buffers import StepBuffers


def _buffers() -> StepBuffers:
    return StepBuffers(64, 8, 6, torch.device("cpu"), pin=False, separate=True)


def test_flush_copies_a_decode_layout_in_one_transfer() -> None:
    buf = _buffers()
    buf.bind_decode(4, 6)
    assert buf.input_ids.shape == (4,) and buf.query_start_loc.shape == (5,) and buf.block_table.shape == (4, 6)
    buf.np_input_ids[:] = [11, 12, 13, 14]
    buf.np_positions[:] = [5, 6, 7, 8]
    buf.np_slot_mapping[:] = [50, 61, 72, 83]
    buf.np_query_start_loc[:] = np.arange(5)
    buf.np_seq_lens[:] = [6, 7, 8, 9]
    buf.np_block_table[:] = np.arange(24).reshape(4, 6)
    buf.np_patch_dst[:2] = [1, 3]
    buf.np_patch_src[:2] = [0, 2]
    buf.upload(4, 4, 6)
    assert buf.input_ids.tolist() == [0, 0, 0, 0]  # deferred until flush
    buf.flush()
    assert buf.input_ids.tolist() == [11, 12, 13, 14]
    assert buf.positions.tolist() == [5, 6, 7, 8]
    assert buf.slot_mapping.tolist() == [50, 61, 72, 83]
    assert buf.query_start_loc.tolist() == [0, 1, 2, 3, 4]
    assert buf.seq_lens.tolist() == [6, 7, 8, 9]
    assert buf.block_table.tolist() == np.arange(24).reshape(4, 6).tolist()
    assert buf.to_device("patch_dst", 2).tolist() == [1, 3]  # travelled with the flush
    assert buf.to_device("patch_src", 2).tolist() == [0, 2]


def test_a_size_keeps_its_device_views_across_host_sets_and_layouts() -> None:
    """A captured graph of one size reads the same device memory at every later step of that size."""
    buf = _buffers()
    buf.bind_decode(2, 6)
    pointers = {name: getattr(buf, name).data_ptr() for name in ("input_ids", "seq_lens", "block_table")}
    host = buf.input_ids_host.data_ptr()
    buf.swap()
    assert buf.input_ids_host.data_ptr() != host  # the other host set
    buf.bind_general()
    assert buf.input_ids.shape == (64,)
    buf.bind_decode(4, 6)
    buf.bind_decode(2, 6)
    assert {name: getattr(buf, name).data_ptr() for name in pointers} == pointers
    buf.np_input_ids[:] = [7, 9]
    buf.upload(2, 2, 6)
    buf.flush()
    assert buf.input_ids.tolist() == [7, 9]


def test_general_layout_uploads_at_once() -> None:
    buf = _buffers()
    buf.np_input_ids[:3] = [1, 2, 3]
    buf.upload(3, 1, 2)
    assert buf.input_ids[:3].tolist() == [1, 2, 3]


@pytest.mark.parametrize(("async_scheduling", "logits_in_graph"), [(False, True), (True, True), (True, False)])
def test_padded_decode_steps_in_the_arena_match_unpadded(qwen3_folder, async_scheduling: bool,
                                                         logits_in_graph: bool) -> None:
    kwargs = {**ENGINE_DEFAULTS, "async_scheduling": async_scheduling}
    params = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True, logprobs=2)
    want = LLM(model=str(qwen3_folder), **kwargs).generate(PROMPTS, params, use_tqdm=False)

    llm = LLM(model=str(qwen3_folder), **kwargs)
    runner = llm.llm_engine.engine_core.executor.runner
    stand_in = DecodeGraphStandIn(runner)
    runner.graphs = stand_in
    runner.logits_in_decode_graphs = logits_in_graph
    got = llm.generate(PROMPTS, params, use_tqdm=False)

    assert [o.outputs[0].token_ids for o in got] == [o.outputs[0].token_ids for o in want]
    for g, w in zip(got, want, strict=True):
        for got_step, want_step in zip(g.outputs[0].logprobs, w.outputs[0].logprobs, strict=True):
            assert got_step.keys() == want_step.keys()
            for token, lp in got_step.items():
                assert lp.logprob == pytest.approx(want_step[token].logprob, abs=1e-5)
    assert any(size > len(PROMPTS) for size in stand_in.replayed)  # padded past the batch


def test_the_other_kv_groups_tables_and_slots_travel_beside_the_arena() -> None:
    buf = StepBuffers(64, 8, 6, torch.device("cpu"), pin=False, separate=True, kv_groups=3)
    assert buf.group_block_table.shape == (2, 8, 6) and buf.group_slot_mapping.shape == (2, 64)
    buf.bind_decode(4, 6)
    buf.np_group_slot_mapping[:, :2] = [[5, 6], [7, 8]]
    buf.np_group_block_table[:, :2, :3] = [[[1, 2, 3], [4, 5, 6]], [[7, 8, 9], [1, 1, 1]]]
    buf.pad(2, 2, 4)  # two one-token dummies: written nowhere, reading the null block
    buf.upload(4, 4, 6)
    buf.flush()
    assert buf.group_slot_mapping[:, :4].tolist() == [[5, 6, -1, -1], [7, 8, -1, -1]]
    assert buf.group_block_table[1, :4, :3].tolist() == [[7, 8, 9], [1, 1, 1], [0, 0, 0], [0, 0, 0]]
    buf.swap()
    buf.bind_general()
    buf.np_group_slot_mapping[:, :3] = [[1, 2, 3], [4, 5, 6]]
    buf.upload(3, 1, 2)
    assert buf.group_slot_mapping[:, :3].tolist() == [[1, 2, 3], [4, 5, 6]]
