"""Async scheduling: a step's input ids that the previous (unresolved) step is still sampling, taken from
that sample on the device."""

from __future__ import annotations

import numpy as np

from infercore.worker.batch_layout import BatchLayout
from infercore.worker.input_batch import InputBatch
from infercore.worker.pending_sample import PendingSample
from infercore.worker.step_buffers import StepBuffers


def patch_inflight_tokens(pending: PendingSample, batch: InputBatch, buf: StepBuffers, max_num_reqs: int,
                          layout: BatchLayout) -> None:
    """Copy tokens ``pending`` sampled into this step's input ids, on the device."""
    source = np.full(max_num_reqs, -1, dtype=np.int64)
    requests = batch.requests
    for j, state in enumerate(pending.states):
        if requests.get(state.req_id) is state:  # not finished or preempted since: its row is its own
            source[state.row] = j
    src = source[layout.rows]
    known = batch.num_tokens[layout.rows]
    mask = (src >= 0) & (known >= layout.num_computed) & (known < layout.seq_lens)
    if not mask.any():
        return
    count = int(mask.sum())
    buf.np_patch_dst[:count] = layout.query_start_loc[:-1][mask] + (known - layout.num_computed)[mask]
    buf.np_patch_src[:count] = src[mask]
    buf.flush()  # a decode layout's inputs and these indices, in one copy
    dst_dev, src_dev = buf.to_device("patch_dst", count), buf.to_device("patch_src", count)
    # A speculating runner's rows are [count, tokens...]: a step in flight verified nothing, so one token each.
    tokens = pending.tokens if pending.tokens.dim() == 1 else pending.tokens[:, 1]
    buf.input_ids.index_copy_(0, dst_dev, tokens.index_select(0, src_dev))
