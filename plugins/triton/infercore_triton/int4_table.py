"""Which W4A16 path multiplies an ``M`` x ``N`` x ``K`` product: the launch table of ``int4_linear``.

Four paths: ``skinny`` (:mod:`infercore_triton.int4_skinny`, packed 16-bit dequantization into the tensor
cores), ``gemv`` (:mod:`infercore_triton.int4_gemv`, fused multiply-adds, single rows), ``gemm``
(:mod:`infercore_triton.int4_gemm`'s tile kernel, which also takes act-order shards) and ``dense`` (the
weight dequantized into a 16-bit scratch, then the dense GEMM). The table shipped beside this module
(:data:`MEASURED_TABLE`, a sweep on an H100) holds the choices at Qwen3-8B's shapes; other shapes, without
measurements, take ``skinny`` up to the table's ``dense_min_m`` rows and ``dense`` from there.

A sweep on the GPU (``benchmarks/int4_sweep.py``) writes a JSON file of measured choices; the file named by
the environment variable :data:`TABLE_ENV` is read at import::

    {"dense_min_m": 32,
     "choices": [{"m": 1, "n": 6144, "k": 4096, "kernel": "skinny", "config": {"block_n": 128, ...}}, ...]}

``m`` is a bucket: the next power of two of the rows (a product of 5 rows takes the entry of 8, one of 300
rows that of 512 or, not measured, of 256).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

#: Environment variable naming the JSON launch table.
TABLE_ENV = "INFERCORE_INT4_TABLE"
#: From this many rows on, without a table entry, the dequantize-then-dense path.
DEFAULT_DENSE_MIN_M = 32
KERNELS = ("skinny", "gemv", "gemm", "dense")
#: The sweep's table for Qwen3-8B's projections on an H100 (used when :data:`TABLE_ENV` names no file): from
#: one row to 256 the skinny and gemv kernels, from 512 the dense path.
MEASURED_TABLE = os.path.join(os.path.dirname(__file__), "int4_table_measured.json")


@dataclass(frozen=True)
class Int4Choice:
    """One measured choice: the path (one of :data:`KERNELS`) and its launch settings (the fields of that
    kernel's config dataclass)."""

    kernel: str
    config: dict[str, Any] = field(default_factory=dict)


@dataclass
class Int4Table:
    """The dense path's threshold and the measured choices by ``(m bucket, N, K)``."""

    dense_min_m: int = DEFAULT_DENSE_MIN_M
    choices: dict[tuple[int, int, int], Int4Choice] = field(default_factory=dict)

    def choice(self, m: int, n: int, k: int, exact: bool = False) -> Int4Choice | None:
        """The measured choice of this product's bucket, else (unless ``exact``) of the largest smaller bucket
        measured at this shape, if any."""
        b = bucket(m)
        if exact:
            return self.choices.get((b, n, k))
        while b >= 1:
            found = self.choices.get((b, n, k))
            if found is not None:
                return found
            b //= 2
        return None

    def to_json(self) -> dict[str, Any]:
        return {"dense_min_m": self.dense_min_m,
                "choices": [{"m": m, "n": n, "k": k, "kernel": c.kernel, "config": c.config}
                            for (m, n, k), c in sorted(self.choices.items())]}


def bucket(m: int) -> int:
    """The table's bucket of ``m`` rows: the next power of two."""
    return 1 << max(0, m - 1).bit_length()


def parse_table(data: dict[str, Any]) -> Int4Table:
    """The table of a JSON document (see the module's docstring); unknown kernels are refused."""
    table = Int4Table(dense_min_m=int(data.get("dense_min_m", DEFAULT_DENSE_MIN_M)))
    for entry in data.get("choices", []):
        if entry["kernel"] not in KERNELS:
            raise ValueError(f"int4 launch table names kernel {entry['kernel']!r}; known: {KERNELS}")
        table.choices[(bucket(int(entry["m"])), int(entry["n"]), int(entry["k"]))] = Int4Choice(
            entry["kernel"], dict(entry.get("config", {})))
    return table


def load_table() -> Int4Table:
    """The table in the file named by :data:`TABLE_ENV`, else the measured one shipped beside this module
    (:data:`MEASURED_TABLE`), else the defaults."""
    path = os.environ.get(TABLE_ENV) or MEASURED_TABLE
    if not os.path.exists(path) and path == MEASURED_TABLE:
        return Int4Table()
    with open(path, encoding="utf-8") as f:
        return parse_table(json.load(f))


#: The table ``int4_linear`` reads (replace its contents to change the choices in a running process).
TABLE = load_table()
