"""The runner's step for a pooling model (:mod:`infercore.pooling`): the requests whose prompt the step
finishes are pooled into results instead of sampled."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from infercore.pooling.runner import PoolingRows, pooling_rows_for
from infercore.wire.pooled import PooledTensor, results_to_host
from infercore.worker.batch_layout import BatchLayout
from infercore.worker.input_batch import InputBatch
from infercore.worker.pending_sample import PendingSample

__all__ = ["pool_step", "pooled_to_host", "pooling_rows_for"]


def pool_step(pooling: PoolingRows, req_ids: list[str], layout: BatchLayout, hidden: torch.Tensor,
              batch: InputBatch, prompt_logprobs: Any) -> PendingSample:
    """A step's pooled results (on the device), as a pending sample with no sampled rows."""
    pooled = pooling.pool_step(req_ids, layout, hidden, batch.requests, batch.num_tokens[layout.rows])
    return PendingSample(req_ids, np.zeros(0, dtype=np.int64), [], prompt_logprobs, pooled=pooled)


def pooled_to_host(pending: PendingSample) -> dict[str, PooledTensor] | None:
    """The pooled results of a step on the host (None when it pooled nothing)."""
    return results_to_host(pending.pooled) if pending.pooled else None
