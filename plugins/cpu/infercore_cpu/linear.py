"""The CPU platform's dense GEMM: float32 linears through oneDNN on x86.

torch sends a float32 ``F.linear`` on a CPU to MKL. On AMD x86 CPUs MKL does not take its AVX-512
kernels, and oneDNN (also inside torch) runs the same float32 products about twice as fast: on a
2-core AMD EPYC (AVX-512), 330-460 GFLOP/s against 135-200 at the shapes of a decode step, and
470-490 against 220 at prefill shapes. The result is float32 arithmetic throughout (no reduced
precision), with a different summation order than MKL's.

Each weight is also kept in oneDNN's own blocked layout (packed once, on its first product): a product
then skips oneDNN's per-call handling of the plain layout, 20-50% faster at decode shapes (64 rows:
101 -> 151 GFLOP/s on one thread of an Intel Xeon with AVX-512). The packed copy costs the weight's
size again, so it is made only while all packed copies stay under :data:`PACKED_BUDGET_BYTES`;
it follows the weight's storage and version counter (an in-place update through ``.data`` after the
first product is not seen: weights are constant while serving).
"""

from __future__ import annotations

import os

import psutil
import torch
import torch.nn.functional as F
from torch.utils.weak import WeakTensorKeyDictionary


def _onednn_linear_available() -> bool:
    return (torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")
            and torch.backends.mkldnn.is_available()
            and hasattr(torch.ops.mkldnn, "_linear_pointwise"))


_ONEDNN = _onednn_linear_available()

#: Entries kept by oneDNN's primitive cache and torch's ideep LRU cache. Each distinct token count of a
#: linear costs about 0.3 MB in each; their default of 1,024 entries let a serving engine whose steps
#: take many token counts grow by hundreds of MB. With the row buckets below, a model's linears need
#: about 60 entries each up to 4,096 rows.
ONEDNN_CACHE_ENTRIES = 512


#: Row count oneDNN chooses the packed layout for (the best of 1-2048 at 8-1024-row products).
PACK_ROWS_HINT = 64
#: Bytes of packed weight copies at most: an eighth of RAM, at most 8 GiB.
PACKED_BUDGET_BYTES = min(8 << 30, psutil.virtual_memory().total // 8)
_packed = WeakTensorKeyDictionary()  # weight -> (its version, its data pointer, the packed copy)
_packed_bytes = 0


def _version(weight: torch.Tensor) -> int:
    """The weight's version counter (-1 for an inference tensor, which has none)."""
    try:
        return weight._version
    except RuntimeError:
        return -1


def packed_weight(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` in oneDNN's packed layout (made on first call, within the budget), else ``weight`` itself."""
    global _packed_bytes
    entry = _packed.get(weight)
    if entry is not None and entry[0] == _version(weight) and entry[1] == weight.data_ptr():
        return entry[2]
    size = weight.numel() * weight.element_size()
    if entry is None and _packed_bytes + size > PACKED_BUDGET_BYTES:
        return weight
    if weight.requires_grad and torch.is_grad_enabled():
        return weight
    try:
        packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), PACK_ROWS_HINT)
    except RuntimeError:
        return weight
    if entry is None:
        _packed_bytes += size
    _packed[weight] = (_version(weight), weight.data_ptr(), packed)
    return packed


def bound_onednn_caches(entries: int = ONEDNN_CACHE_ENTRIES) -> None:
    """Cap oneDNN's shape caches (read when first used, so call before the first linear); a value the
    user set in the environment is kept."""
    for name in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY"):
        os.environ.setdefault(name, str(entries))


def row_bucket(rows: int) -> int:
    """The row count a linear of ``rows`` rows runs at: exact up to 16, then rounded up to a multiple of
    16, or of 1/16 of the enclosing power of two when that is larger (so padding adds under 1/8 above
    256 rows). oneDNN builds and caches a kernel per row count; the token counts of mixed serving
    steps would otherwise fill its cache without end, while these ~8 sizes per octave stay in it.
    Small products are bound by reading the weight, so their padding rows cost little."""
    if rows <= 16:
        return rows
    step = max(16, (1 << (rows - 1).bit_length()) // 16)
    return -(-rows // step) * step


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x @ weight.T + bias``; float32 CPU tensors through oneDNN, anything else through ``F.linear``."""
    if (not _ONEDNN or x.dtype != torch.float32 or weight.dtype != torch.float32 or x.numel() == 0
            or (bias is not None and bias.dtype != torch.float32)):
        return F.linear(x, weight, bias)
    rows = x.numel() // x.shape[-1]
    padded = row_bucket(rows)
    weight = packed_weight(weight)
    if padded == rows:
        return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")
    flat = x.new_zeros(padded, x.shape[-1])
    flat[:rows] = x.reshape(rows, x.shape[-1])
    out = torch.ops.mkldnn._linear_pointwise(flat, weight, bias, "none", [], "")
    return out[:rows].view(*x.shape[:-1], weight.shape[0])
