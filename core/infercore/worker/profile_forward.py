"""The forward pass that memory profiling measures: the largest step a runner can be given."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from infercore.forward_context import set_forward_context
from infercore.layers.pipeline_parallel import get_pp_state
from infercore.worker.batch_layout import make_layout

if TYPE_CHECKING:
    from infercore.worker.model_runner import ModelRunner


def profile_forward(runner: ModelRunner, num_tokens: int) -> None:
    """A forward pass of ``num_tokens`` prompt tokens into a scratch cache (for memory profiling), and
    the logits of ``max_num_seqs`` rows on the last pipeline stage.

    The first request has a one-token query, so the batch is a mixed one and the backend's kernels for
    decodes beside prefills are built here rather than during the first requests. Every pipeline stage
    runs it with the same tokens, so each receives what the stage before sent.
    """
    max_reqs, max_len, block_size = runner.max_num_reqs, runner.max_model_len, runner.block_size
    lead = 1 if num_tokens > 1 and max_reqs > 1 else 0
    # No step holds more than max_num_reqs requests of at most max_model_len tokens.
    prompt_tokens = min(num_tokens - lead, (max_reqs - lead) * max_len)
    seq = min(prompt_tokens, max_len)
    num_prompts = math.ceil(prompt_tokens / seq)
    lengths = np.full(lead + num_prompts, seq)
    lengths[:lead] = 1
    lengths[-1] = prompt_tokens - seq * (num_prompts - 1)
    n_req = len(lengths)
    per_req = math.ceil(seq / block_size)
    kv_setup = runner.kv_setup
    caches = kv_setup.allocate(runner.backend, [n_req * per_req + 1] * len(kv_setup.groups))
    kv_setup.bind(runner.model, runner.backend, caches, runner.dtype)
    builders = runner._new_builders()
    layout = make_layout(np.arange(n_req), lengths, np.zeros(n_req, dtype=np.int64))
    table = 1 + np.arange(n_req * per_req, dtype=np.int32).reshape(n_req, per_req)
    blocks = table[layout.token_rows, layout.positions // block_size].astype(np.int64)
    slots = blocks * block_size + layout.positions % block_size
    meta = runner._fill(layout, np.zeros(layout.num_tokens, dtype=np.int64), slots, table)
    buffers = runner.buffers
    with set_forward_context(runner._context(meta, layout.num_tokens, builders)):
        hidden = runner.model(buffers.input_ids[: layout.num_tokens], buffers.positions[: layout.num_tokens])
        if get_pp_state().is_last:
            runner.model.compute_logits(hidden[-max_reqs:])
    get_pp_state().wait_sends()
    del caches
