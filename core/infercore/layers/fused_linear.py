"""Column-parallel linears that hold several checkpoint matrices stacked in one weight."""

from __future__ import annotations

import torch
from torch import nn

from infercore.layers.linear import ColumnParallelLinear, _copy_checked, _copy_shard_entry
from infercore.layers.tensor_parallel import divide, get_tp_state, kv_heads_per_rank
from infercore.quantization import QuantizationMethod, layout_of


class MergedColumnParallelLinear(ColumnParallelLinear):
    """Several column-parallel projections of the same input fused into one matmul (``gate_up``).

    ``weight_loader(param, loaded, shard_id)`` takes the full checkpoint tensor of projection
    ``shard_id`` (its index in ``output_sizes``) and fills this rank's rows of it; a parameter with
    one entry per projection (a per-tensor scale) gets entry ``shard_id``.
    """

    def __init__(self, input_size: int, output_sizes: list[int], bias: bool = False, *,
                 quant_method: QuantizationMethod | None = None, prefix: str = "") -> None:
        super().__init__(input_size, sum(output_sizes), bias, output_sizes=output_sizes,
                         quant_method=quant_method, prefix=prefix)

    def shard_index(self, shard_id: int | str) -> int:
        """The position of projection ``shard_id`` in ``output_sizes``."""
        return int(shard_id)

    def shard_range(self, shard_id: int | str) -> tuple[int, int, int]:
        """(offset in this rank's weight, rows, offset of this rank's rows in the checkpoint tensor)."""
        index = self.shard_index(shard_id)
        offset = sum(self.output_sizes[:index])
        size = self.output_sizes[index]
        return offset, size, self.tp_rank * size

    def weight_loader(self, param: nn.Parameter, loaded: torch.Tensor, shard_id: int | str | None = None) -> None:
        if shard_id is None:
            raise ValueError("a fused linear layer loads one projection at a time; pass its shard_id")
        layout = layout_of(param)
        if layout.per_shard:
            _copy_shard_entry(param, self.shard_index(shard_id), loaded)
            return
        if layout.output_dim is None:
            _copy_checked(param, loaded)
            return
        offset, size, source = (v // layout.rows_per_entry for v in self.shard_range(shard_id))
        dim = layout.output_dim
        _copy_checked(param.data.narrow(dim, offset, size), loaded.narrow(dim, source, size))


class QKVParallelLinear(MergedColumnParallelLinear):
    """The fused q, k, v projection; shard ids are ``"q"``, ``"k"`` and ``"v"``.

    Heads are split across ranks; when there are fewer KV heads than ranks, each KV head is
    replicated on ``tp_size / num_kv_heads`` ranks.
    """

    def __init__(self, hidden_size: int, head_size: int, num_heads: int, num_kv_heads: int,
                 bias: bool = False, *, quant_method: QuantizationMethod | None = None, prefix: str = "") -> None:
        tp_size = get_tp_state().size
        self.num_heads = divide(num_heads, tp_size, "number of attention heads")
        self.num_kv_heads = kv_heads_per_rank(num_kv_heads, tp_size)
        self.head_size = head_size
        sizes = [self.num_heads * head_size, self.num_kv_heads * head_size, self.num_kv_heads * head_size]
        super().__init__(hidden_size, [s * tp_size for s in sizes], bias, quant_method=quant_method, prefix=prefix)
        self.num_kv_head_replicas = max(1, tp_size // num_kv_heads)

    def shard_index(self, shard_id: int | str) -> int:
        return {"q": 0, "k": 1, "v": 2}[str(shard_id)]

    def shard_range(self, shard_id: int | str) -> tuple[int, int, int]:
        index = self.shard_index(shard_id)
        offset = sum(self.output_sizes[:index])
        size = self.output_sizes[index]
        rank_in_source = self.tp_rank if index == 0 else self.tp_rank // self.num_kv_head_replicas
        return offset, size, rank_in_source * size
