"""LoRA around a parallel linear: the base projection plus, per token, ``(x A[slot]^T) B[slot]^T`` of
the token's adapter slot (nothing at all in a step where no token has an adapter). Over an unquantized base on
a platform with a ``lora_linear`` kernel, the product and the term are that one op (which may add the term
inside its GEMM); else the base's method, then the ``lora_apply`` custom op."""

from __future__ import annotations

import torch
from torch import nn

from infercore.layers.fused_linear import QKVParallelLinear
from infercore.layers.linear import LinearBase
from infercore.layers.tensor_parallel import get_tp_state
from infercore.lora.step_state import LoRAStepState
from infercore.ops import lora_reference
from infercore.ops.dispatch import get_op
from infercore.quantization.unquantized import UnquantizedLinearMethod


class LoRALinear(nn.Module):
    """Wraps ``base`` (column- or row-parallel, possibly fused: q/k/v, gate/up) with ``max_loras`` slots.

    ``lora_a`` is [slots, N*R, in] (the A of each of the N output slices, rank-padded to R with zeros)
    and ``lora_b`` [slots, out, R] (each slice's B in its rows, the scaling folded in), both sharded as
    the base weight is: a column-parallel layer keeps this rank's B rows and the whole A, a row-parallel
    one this rank's A columns and the whole B, its partial sums joining the base's in one all-reduce.
    """

    def __init__(self, base: LinearBase, row_parallel: bool, max_loras: int, max_rank: int, dtype: torch.dtype,
                 state: LoRAStepState) -> None:
        super().__init__()
        self.base = base
        self.row_parallel = row_parallel
        self.max_rank = max_rank
        sizes = [base.output_size] if row_parallel else base.output_sizes
        self.slice_offsets = tuple(sum(sizes[:i]) for i in range(len(sizes) + 1))
        device = next(base.parameters()).device
        self.register_buffer("lora_a", torch.zeros(max_loras, len(sizes) * max_rank, base.input_size, dtype=dtype,
                                                   device=device), persistent=False)
        self.register_buffer("lora_b", torch.zeros(max_loras, base.output_size, max_rank, dtype=dtype,
                                                   device=device), persistent=False)
        self.state = state
        self._apply = get_op("lora_apply")
        self._lora_linear = get_op("lora_linear")
        #: Whether product and term run as the platform's one op (a kernel, over a weight it can read).
        self._whole = (self._lora_linear is not lora_reference.lora_linear
                       and isinstance(base.quant_method, UnquantizedLinearMethod))

    @property
    def fuses_silu_and_mul(self) -> bool:
        """Whether :meth:`forward_silu_and_mul` takes a SwiGLU's ``cat(gate, up)`` as it is (a down projection
        whose base fuses the activation and whose platform runs ``lora_linear``)."""
        return self._whole and self.row_parallel and self.base.fuses_silu_and_mul

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._forward(x, gated=False)

    def forward_silu_and_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        """The layer applied to ``silu(gate) * up`` of ``gate_up`` = ``cat(gate, up)``, as the base's
        ``forward_silu_and_mul`` (only where :attr:`fuses_silu_and_mul`)."""
        return self._forward(gate_up, gated=True)

    def _forward(self, x: torch.Tensor, gated: bool) -> torch.Tensor:
        base = self.base
        step = self.state.step_for(x.shape[0]) if self._whole else None
        if step is not None:  # the base product and the adapter term in one op
            bias = None if self.row_parallel else base.bias
            out = self._lora_linear(x, base.weight, bias, self.lora_a, self.lora_b, *step, self.slice_offsets,
                                    gated)
        elif gated:
            out = base.quant_method.apply_silu_and_mul(base, x)  # no adapter in this step
        else:  # a row-parallel layer adds its bias once, after the ranks' sum
            out = base.quant_method.apply(base, x, None if self.row_parallel else base.bias)
            self._add_lora(x, out)
        if not self.row_parallel:
            return out
        out = get_tp_state().all_reduce(out)
        return out if base.bias is None else out + base.bias

    def _add_lora(self, x: torch.Tensor, out: torch.Tensor) -> None:
        step = self.state.step_for(x.shape[0])  # the step's views, made once per token count
        if step is not None:
            self._apply(out, x, self.lora_a, self.lora_b, *step, self.slice_offsets)

    def clear_slot(self, slot: int) -> None:
        """Zero slot ``slot`` (an adapter that leaves this layer untouched)."""
        self.lora_a[slot].zero_()
        self.lora_b[slot].zero_()

    def set_slice(self, slot: int, index: int, a: torch.Tensor, b: torch.Tensor) -> None:
        """Write output slice ``index`` of slot ``slot`` from the full (unsharded) ``a`` [r, in] and ``b``
        [slice out, r]; copies without blocking when the host tensors are pinned."""
        rank, base = a.shape[0], self.base
        row = index * self.max_rank
        tp = get_tp_state()
        if self.row_parallel:
            width = base.input_size
            self.lora_a[slot, row: row + rank].copy_(a[:, tp.rank * width:(tp.rank + 1) * width], non_blocking=True)
            self.lora_b[slot, :, :rank].copy_(b, non_blocking=True)
            return
        self.lora_a[slot, row: row + rank].copy_(a, non_blocking=True)
        shard_id: int | str = ("q", "k", "v")[index] if isinstance(base, QKVParallelLinear) else index
        offset, size, source = base.shard_range(shard_id)
        self.lora_b[slot, offset: offset + size, :rank].copy_(b[source: source + size], non_blocking=True)
