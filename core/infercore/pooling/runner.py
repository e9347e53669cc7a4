"""The model runner's pooling rows: each pooling request's hidden states become its pooled result.

A request's prompt may be computed over several steps (chunked prefill, decoder models only). LAST
pooling needs the final chunk alone; the other methods keep every chunk's hidden states until the
last one arrives. The common case, a whole prompt in one step, is pooled for all such requests of
the step at once (one gather for LAST and CLS, one scatter-add for MEAN).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np
import torch

from infercore.pooling.config import PoolingModelInfo
from infercore.pooling.head import apply_heads
from infercore.pooling.methods import PoolingType, pool_hidden
from infercore.pooling_params import PoolingParams


class _Layout(Protocol):
    rows: np.ndarray
    num_scheduled: np.ndarray
    num_computed: np.ndarray
    query_start_loc: np.ndarray

    @property
    def seq_lens(self) -> np.ndarray: ...


class _State(Protocol):
    sampling_params: Any
    prompt_token_ids: list[int]


class PoolingRows:
    """Pools the requests of a pooling model, step by step."""

    def __init__(self, info: PoolingModelInfo, model: torch.nn.Module) -> None:
        self.info = info
        self.method = info.pooler.pooling_type
        self.classifier = getattr(model, "classify", None)
        #: Hidden states of the chunks computed so far, per request still prefilling (not LAST pooling).
        self._chunks: dict[str, list[torch.Tensor]] = {}

    def pool_step(self, req_ids: list[str], layout: _Layout, hidden: torch.Tensor,
                  requests: Mapping[str, _State], num_tokens: np.ndarray) -> dict[str, torch.Tensor]:
        """The results (on the device) of the step's requests whose prompt is now fully computed.

        ``hidden`` has one row per scheduled token, in batch order; ``num_tokens[i]`` is the length of
        request ``req_ids[i]``'s prompt."""
        for rid in [r for r in self._chunks if r not in requests]:
            del self._chunks[rid]  # aborted while prefilling
        starts = layout.query_start_loc
        seq_lens = layout.seq_lens
        done = seq_lens >= num_tokens
        whole = done & (layout.num_computed == 0)
        if self.method is PoolingType.LAST:
            whole = done  # the last position is in the final chunk, whatever came before
        pooled: dict[int, torch.Tensor] = {}
        fast = np.nonzero(whole)[0] if self.method in (PoolingType.LAST, PoolingType.CLS, PoolingType.MEAN) else []
        if len(fast):
            for i, row in zip(fast.tolist(), self._pool_whole(fast, starts, hidden), strict=True):
                pooled[i] = row
        for i, rid in enumerate(req_ids):
            if i in pooled:
                continue
            chunk = hidden[int(starts[i]): int(starts[i + 1])]
            if layout.num_computed[i] == 0:
                self._chunks[rid] = []  # a first chunk (again, after a preemption)
            self._chunks.setdefault(rid, []).append(chunk.clone() if not done[i] else chunk)
            if done[i]:
                full = torch.cat(self._chunks.pop(rid))
                pooler = self.info.pooler
                pooled[i] = pool_hidden(self.method, full, requests[rid].prompt_token_ids, pooler.step_tag_id,
                                        list(pooler.returned_token_ids) if pooler.returned_token_ids else None)
        if not pooled:
            return {}
        order = sorted(pooled)
        params: list[PoolingParams] = [requests[req_ids[i]].sampling_params.pooling_params for i in order]
        results = apply_heads([pooled[i] for i in order], params, self.classifier)
        return {req_ids[i]: t for i, t in zip(order, results, strict=True)}

    def _pool_whole(self, batch: np.ndarray, starts: np.ndarray, hidden: torch.Tensor) -> torch.Tensor:
        """LAST / CLS / MEAN of the requests at ``batch`` whose whole prompt is in this step: [len(batch), H]."""
        device = hidden.device
        if self.method is PoolingType.LAST:
            return hidden[torch.from_numpy(starts[batch + 1] - 1).to(device, torch.long)]
        if self.method is PoolingType.CLS:
            return hidden[torch.from_numpy(starts[batch]).to(device, torch.long)]
        lengths = (starts[batch + 1] - starts[batch]).astype(np.int64)
        index = np.repeat(np.arange(len(batch)), lengths)
        tokens = np.concatenate([np.arange(starts[i], starts[i + 1]) for i in batch.tolist()])
        rows = hidden[torch.from_numpy(tokens).to(device)].float()
        sums = torch.zeros((len(batch), hidden.shape[1]), dtype=torch.float32, device=device)
        sums.index_add_(0, torch.from_numpy(index).to(device), rows)
        return sums / torch.from_numpy(lengths).to(device).unsqueeze(1)


def pooling_rows_for(config: Any, model: torch.nn.Module) -> PoolingRows | None:
    """The runner's pooling rows when the engine runs a pooling model (None when it generates)."""
    from infercore.pooling.config import pooling_model_info

    info = pooling_model_info(config)
    return None if info is None else PoolingRows(info, model)
