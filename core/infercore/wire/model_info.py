"""Facts about the served model that both the API process and EngineCore need."""

from __future__ import annotations

import msgspec


class ModelInfo(msgspec.Struct, array_like=True):
    """Resolved limits and token ids of the model being served."""

    max_model_len: int
    vocab_size: int
    eos_token_id: int | None
    generation_stop_ids: list[int]
    num_kv_blocks: int = 0
