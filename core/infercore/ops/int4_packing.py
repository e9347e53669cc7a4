"""4-bit codes packed eight to an int32, in the orders AWQ and GPTQ checkpoints use.

Every 4-bit format stores unsigned codes ``q`` in 0..15, eight to an int32, nibble ``i`` in bits
``4i .. 4i+3``. They differ in which entries share an int32:

* **Sequential** (GPTQ, and the INT4 kernels' own layout): nibble ``i`` of the int32 at index ``j``
  along the packed dimension holds entry ``8j + i``. GPTQ packs ``qweight`` along the input features
  ([in/8, out]) and ``qzeros`` along the output features ([groups, out/8]).
* **AWQ's interleaved order** (the GEMM kernels of AutoAWQ): both ``qweight`` [in, out/8] and
  ``qzeros`` [groups, out/8] pack eight output columns per int32, nibble ``i`` holding column
  ``AWQ_ORDER[i]`` of the eight.
"""

from __future__ import annotations

import torch

#: Codes in one int32.
PACK = 8
BITS = 4
#: Output column (of eight) that nibble ``i`` of an AWQ int32 holds.
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
#: Nibble that holds output column ``j`` (of eight) in an AWQ int32: the inverse of :data:`AWQ_ORDER`.
AWQ_REVERSE_ORDER = tuple(AWQ_ORDER.index(j) for j in range(PACK))


def _shifts(device: torch.device) -> torch.Tensor:
    return torch.arange(0, 32, BITS, dtype=torch.int32, device=device)


def unpack_sequential(packed: torch.Tensor, dim: int) -> torch.Tensor:
    """The int32 ``packed`` [R, C] unpacked along ``dim`` (0: [8R, C]; 1: [R, 8C]) into uint8 codes."""
    if packed.dtype != torch.int32 or packed.dim() != 2:
        raise ValueError(f"packed 4-bit weights are a 2-D int32 tensor, got {packed.dtype} {tuple(packed.shape)}")
    rows, cols = packed.shape
    shifts = _shifts(packed.device)
    if dim == 0:
        codes = (packed.unsqueeze(1) >> shifts.view(1, PACK, 1)) & 0xF
        return codes.reshape(rows * PACK, cols).to(torch.uint8)
    codes = (packed.unsqueeze(2) >> shifts.view(1, 1, PACK)) & 0xF
    return codes.reshape(rows, cols * PACK).to(torch.uint8)


def pack_sequential(codes: torch.Tensor, dim: int) -> torch.Tensor:
    """Codes [R, C] (values 0..15) packed eight to an int32 along ``dim``: the inverse of :func:`unpack_sequential`."""
    if codes.shape[dim] % PACK:
        raise ValueError(f"{codes.shape[dim]} entries along dimension {dim} do not pack into whole int32s of {PACK}")
    rows, cols = codes.shape
    grouped = codes.reshape(rows // PACK, PACK, cols) if dim == 0 else codes.reshape(rows, cols // PACK, PACK)
    words = None
    for nibble in range(PACK):
        part = (grouped[:, nibble, :] if dim == 0 else grouped[:, :, nibble]).to(torch.int32) & 0xF
        if nibble == PACK - 1:
            # The top nibble holds the sign bit: codes 8..15 are the negative words' -8..-1, shifted without
            # overflowing int32.
            part = torch.where(part >= 8, part - 16, part)
        shifted = part << (BITS * nibble)
        words = shifted if words is None else words | shifted
    return words.contiguous()


def pack_interleaved(codes: torch.Tensor) -> torch.Tensor:
    """Codes [R, C] packed eight rows to an int32 ([R/8, C]), nibble ``i`` holding row ``AWQ_ORDER[i]`` of the
    eight: rows ``2r`` and ``2r + 1`` sit 16 bits apart, in the two halves of ``word >> 4r``."""
    rows, cols = codes.shape
    if rows % PACK:
        raise ValueError(f"{rows} rows do not pack into whole int32s of {PACK}")
    order = torch.tensor(AWQ_ORDER, device=codes.device)
    return pack_sequential(codes.reshape(rows // PACK, PACK, cols).index_select(1, order).reshape(rows, cols), dim=0)


def unpack_interleaved(packed: torch.Tensor) -> torch.Tensor:
    """The codes [8R, C] of :func:`pack_interleaved`'s words [R, C], in row order."""
    nibbles = unpack_sequential(packed, dim=0).view(packed.shape[0], PACK, packed.shape[1])
    order = torch.tensor(AWQ_REVERSE_ORDER, device=packed.device)
    return nibbles.index_select(1, order).reshape(packed.shape[0] * PACK, packed.shape[1])


def unpack_awq(packed: torch.Tensor) -> torch.Tensor:
    """AWQ's ``qweight`` [in, out/8] or ``qzeros`` [groups, out/8] as uint8 codes [rows, out] in column order."""
    nibbles = unpack_sequential(packed, dim=1).view(packed.shape[0], packed.shape[1], PACK)
    order = torch.tensor(AWQ_REVERSE_ORDER, device=packed.device)
    return nibbles.index_select(2, order).reshape(packed.shape[0], packed.shape[1] * PACK)
