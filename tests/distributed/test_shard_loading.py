"""Each tensor-parallel rank loads exactly its shard, and reads only that region from safetensors."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from infercore.config import InfercoreConfig
from infercore.layers.checkpoint_slice import CheckpointSlice
from infercore.layers.tensor_parallel import set_tp_state
from infercore.models.loader import load_model


@pytest.fixture
def checkpoint(qwen3_folder):
    return load_file(str(next(qwen3_folder.glob("*.safetensors"))))


def _load_rank(folder, rank: int, monkeypatch) -> tuple[torch.nn.Module, list[tuple[torch.Size, torch.Size]]]:
    """The rank's model, and (shape in the file, shape read) of every tensor it read."""
    reads: list[tuple[torch.Size, torch.Size]] = []
    materialize = CheckpointSlice.materialize

    def spy(self: CheckpointSlice) -> torch.Tensor:
        out = materialize(self)
        reads.append((torch.Size(self._source.get_shape()), out.shape))
        return out

    monkeypatch.setattr(CheckpointSlice, "materialize", spy)
    set_tp_state(rank, 2)
    try:
        model = load_model(InfercoreConfig.from_kwargs(model=str(folder), dtype="float32"), torch.device("cpu"),
                           torch.float32)
    finally:
        set_tp_state(0, 1)
    return model, reads


@pytest.mark.parametrize("rank", [0, 1])
def test_rank_holds_its_shard(qwen3_folder, checkpoint, rank: int, monkeypatch) -> None:
    model, reads = _load_rank(qwen3_folder, rank, monkeypatch)
    layer = model.model.layers[0]
    prefix = "model.layers.0."
    rows = slice(rank * 64, (rank + 1) * 64)  # intermediate 128 over 2 ranks
    down = checkpoint[prefix + "mlp.down_proj.weight"]
    assert torch.equal(layer.mlp.down_proj.weight, down[:, rows])
    gate, up = checkpoint[prefix + "mlp.gate_proj.weight"], checkpoint[prefix + "mlp.up_proj.weight"]
    assert torch.equal(layer.mlp.gate_up_proj.weight, torch.cat([gate[rows], up[rows]]))
    q, k, v = (checkpoint[prefix + f"self_attn.{p}_proj.weight"] for p in "qkv")
    heads = slice(rank * 32, (rank + 1) * 32)  # 2 of 4 query heads, 1 of 2 KV heads, 16 wide each
    kv = slice(rank * 16, (rank + 1) * 16)
    assert torch.equal(layer.self_attn.qkv_proj.weight, torch.cat([q[heads], k[kv], v[kv]]))
    vocab = checkpoint["model.embed_tokens.weight"]
    per_rank = model.model.embed_tokens.rows_per_rank
    own = vocab[rank * per_rank: (rank + 1) * per_rank]
    assert torch.equal(model.model.embed_tokens.weight[: len(own)], own)
    # Every matrix of this model is split over the two ranks: each was read as its half, never whole.
    matrices = [(full, read) for full, read in reads if len(full) == 2]
    assert len(matrices) == 2 + 7 * 2  # embedding, LM head and seven projections in each of two layers
    assert all(read.numel() * 2 == full.numel() for full, read in matrices), matrices
