"""The static buffers behind the draft's captured graphs, driven on the host with stand-in graphs that rerun
the step: a catch-up padded to a captured size and the one-token steps see exactly their rows' tokens,
positions, slots and context lengths (padding writes nowhere, reads nothing)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from infercore.worker.draft_catch_up import CatchUpGraphs
from infercore.worker.draft_steps import DraftSteps

BLOCK = 4


class _Graph:
    """Reruns a step and writes its results where the captured outputs live."""

    def __init__(self) -> None:
        self.rerun: Callable[[], tuple[torch.Tensor, torch.Tensor]] | None = None
        self.out: tuple[torch.Tensor, torch.Tensor] | None = None

    def replay(self) -> None:
        assert self.rerun is not None and self.out is not None
        for dst, src in zip(self.out, self.rerun(), strict=True):
            dst.copy_(src)


class _Platform:
    capabilities = SimpleNamespace(pin_memory=False, graph_capture=True)

    def graph_pool_handle(self) -> None:
        return None

    def new_graph(self) -> _Graph:
        return _Graph()

    @contextlib.contextmanager
    def capture_graph(self, graph: _Graph, pool: Any = None) -> Iterator[None]:
        yield

    def synchronize(self) -> None:
        pass


class _Builder:
    def build(self, meta: Any) -> Any:
        return meta


def _runner(block_table: np.ndarray) -> Any:
    target = SimpleNamespace(platform=_Platform(), max_blocks_per_req=block_table.shape[1],
                             input_batch=SimpleNamespace(block_table=block_table), dtype=torch.float32)
    return SimpleNamespace(device=torch.device("cpu"), group_of=[0], stride=1, block_size=BLOCK, target=target,
                           builders=[_Builder()], draft_tp=None, max_verify_len=5)


def _bind(graphs: Any, rerun: Callable[[int], tuple[torch.Tensor, torch.Tensor]]) -> None:
    for size, (graph, out) in graphs.graphs.items():
        graph.rerun, graph.out = (lambda s=size: rerun(s)), out


@torch.inference_mode()
def test_catch_up_replay_pads_tokens_and_requests() -> None:
    table = np.arange(1, 1 + 3 * 8, dtype=np.int32).reshape(3, 8)
    seen: dict[str, torch.Tensor] = {}

    def fn(ids: torch.Tensor, pos: torch.Tensor, target_rows: torch.Tensor, last: torch.Tensor):
        seen.update(ids=ids.clone(), pos=pos.clone())
        return (ids.index_select(0, last).float().unsqueeze(1).repeat(1, 2), pos.index_select(0, last) + 1000)

    graphs = CatchUpGraphs(_runner(table), fn, max_rows=4, max_tokens=16)
    graphs.capture()
    assert graphs.sizes == [8, 16]
    _bind(graphs, graphs._unpack_and_run)
    rows, query_lens = np.array([2, 0]), np.array([1, 3])
    positions = np.array([5, 8, 9, 10])
    ids = np.array([50, 60, 61, 62])
    size = graphs.size_for(4, 2)
    assert size == 8 and graphs.size_for(17, 1) is None and graphs.size_for(8, 5) is None
    hidden, tokens = graphs.replay(size, rows, query_lens, np.array([6, 11]), positions, ids, np.zeros(4, np.int64),
                                   np.array([0, 3]))
    assert tokens.tolist() == [1005, 1010] and hidden[:, 0].tolist() == [50.0, 62.0]
    assert seen["ids"].tolist() == [50, 60, 61, 62, 0, 0, 0, 0]
    assert graphs.query_start_loc.tolist() == [0, 1, 4, 4, 4]
    assert graphs.seq_lens.tolist() == [6, 11, 0, 0]
    expected = [table[2, 1] * BLOCK + 1, table[0, 2] * BLOCK, table[0, 2] * BLOCK + 1, table[0, 2] * BLOCK + 2]
    assert graphs.slots[0, :8].tolist() == expected + [-1] * 4
    assert graphs.tables[0, :2].tolist() == table[[2, 0]].tolist()


@torch.inference_mode()
@pytest.mark.parametrize("last_on_device", [False, True])
def test_draft_steps_feed_each_step_the_previous_tokens(last_on_device: bool) -> None:
    table = np.arange(1, 1 + 4 * 8, dtype=np.int32).reshape(4, 8)
    calls: list[tuple[list[int], list[int], list[int]]] = []
    runner = _runner(table)
    steps: DraftSteps

    def step(ids: torch.Tensor, pos: torch.Tensor, hidden: torch.Tensor):
        size = len(ids)
        calls.append((steps.positions[:size].tolist(), steps.seq_lens[:size].tolist(), steps.slots[0, :size].tolist()))
        return hidden + 1, ids + 1

    steps = DraftSteps(runner, step, hidden_size=2, hidden_dtype=torch.float32, max_rows=4, max_steps=3)
    steps.capture()
    for size, (graph, out) in steps.graphs.items():  # a replay reruns the whole chain
        graph.rerun, graph.out = (lambda s=size: (steps._chain(s),)), (out,)
    calls.clear()
    rows, last_pos, counts = np.array([3, 1, 0]), np.array([6, 2, 9]), np.array([4, 2, 1])
    last = torch.from_numpy(last_pos) if last_on_device else last_pos
    out = steps.run(rows, last, counts, torch.tensor([10, 20, 30]), torch.zeros((3, 2)))
    # Row 0 drafts 4 tokens (three steps), row 1 two (one step), row 2 only its first; PAD after.
    assert out.tolist() == [[10, 11, 12, 13], [20, 21, -1, -1], [30, -1, -1, -1]]
    assert len(calls) == 3 and len(calls[0][0]) == 4  # three rows padded to the graph of 4, every step run
    positions, seq_lens, slots = calls[0]
    assert positions[:3] == [7, 3, 9] and seq_lens == [8, 4, 10, 0]
    assert slots == [table[3, 1] * BLOCK + 3, table[1, 0] * BLOCK + 3, -1, -1]
    assert calls[2][0][:3] == [9, 2, 9] and calls[2][1] == [10, 3, 10, 0]
    assert calls[2][2] == [table[3, 2] * BLOCK + 1, -1, -1, -1]


@torch.inference_mode()
def test_eager_draft_steps_give_the_same_drafts() -> None:
    table = np.arange(1, 1 + 4 * 8, dtype=np.int32).reshape(4, 8)
    steps = DraftSteps(_runner(table), lambda ids, pos, hidden: (hidden + 1, ids + 1), hidden_size=2,
                       hidden_dtype=torch.float32, max_rows=4, max_steps=3)
    out = steps.run(np.array([3, 1, 0]), np.array([6, 2, 9]), np.array([4, 2, 1]), torch.tensor([10, 20, 30]),
                    torch.zeros((3, 2)))
    assert out.tolist() == [[10, 11, 12, 13], [20, 21, -1, -1], [30, -1, -1, -1]]
    one = steps.run(np.array([2]), np.array([5]), np.array([1]), torch.tensor([7]), torch.zeros((1, 2)))
    assert one.tolist() == [[7]]
