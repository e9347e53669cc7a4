"""The scheduler's side of pooling: a pooling request finishes with its result once its prompt is computed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from infercore.wire.messages import EngineCoreOutput, FinishReason
from infercore.wire.pooled import PooledTensor

if TYPE_CHECKING:
    from infercore.scheduler.request import Request


def pooled_output(request: Request, pooled: PooledTensor) -> EngineCoreOutput:
    """The finishing output of a pooling request: no tokens, its pooled result."""
    request.num_output_placeholders = 0
    return EngineCoreOutput(request.request_id, [], finish_reason=FinishReason.STOP,
                            num_cached_tokens=max(request.num_cached_tokens, 0), pooled=pooled)
