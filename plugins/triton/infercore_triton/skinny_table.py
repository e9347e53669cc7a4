"""Which decode-sized bf16/fp16 products the skinny GEMM takes, and with what settings: its launch table.

Without a table, ``linear`` sends products of 1-4 rows and at most 2,048 output features to the skinny
kernel (:data:`~infercore_triton.skinny_gemm.SKINNY_MAX_M`, :data:`~infercore_triton.skinny_gemm.SKINNY_MAX_N`,
from an H200 measured with the default settings) and everything else to cuBLAS. A sweep on the GPU
(``benchmarks/skinny_gemm.py --sweep --write-table PATH``) times the kernel's settings against cuBLAS per
shape and row bucket, inside CUDA graphs as decode runs, and writes a JSON file of choices; the file named
by the environment variable :data:`TABLE_ENV` is read at import::

    {"choices": [{"m": 1, "n": 24576, "k": 4096, "kernel": "skinny",
                  "config": {"block_n": 8, "block_k": 1024, ...}, "skinny_us": 70.1, "cublas_us": 80.3}, ...]}

A listed shape goes where its entry says (``skinny`` with its settings, or ``cublas``); other shapes follow
the rule above. ``m`` is a bucket: the next power of two of the rows, up to 16.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from infercore_triton.int4_table import bucket  # the launch tables' row bucket: the next power of two

#: Environment variable naming the JSON launch table.
TABLE_ENV = "INFERCORE_SKINNY_TABLE"
KERNELS = ("skinny", "cublas")


@dataclass(frozen=True)
class SkinnyChoice:
    """One measured choice: ``skinny`` (with the fields of its ``SkinnyConfig``) or ``cublas``."""

    kernel: str
    config: dict[str, Any] = field(default_factory=dict)


@dataclass
class SkinnyTable:
    """The measured choices by ``(m bucket, N, K)``."""

    choices: dict[tuple[int, int, int], SkinnyChoice] = field(default_factory=dict)

    def choice(self, m: int, n: int, k: int) -> SkinnyChoice | None:
        """The measured choice of this product's row bucket, if any."""
        return self.choices.get((bucket(m), n, k))

    def to_json(self) -> dict[str, Any]:
        return {"choices": [{"m": m, "n": n, "k": k, "kernel": c.kernel, "config": c.config}
                            for (m, n, k), c in sorted(self.choices.items())]}


def parse_table(data: dict[str, Any]) -> SkinnyTable:
    """The table of a JSON document (see the module's docstring); unknown kernels are refused."""
    table = SkinnyTable()
    for entry in data.get("choices", []):
        if entry["kernel"] not in KERNELS:
            raise ValueError(f"skinny launch table names kernel {entry['kernel']!r}; known: {KERNELS}")
        table.choices[(bucket(int(entry["m"])), int(entry["n"]), int(entry["k"]))] = SkinnyChoice(
            entry["kernel"], dict(entry.get("config", {})))
    return table


def load_table() -> SkinnyTable:
    """The table in the file named by :data:`TABLE_ENV`, else an empty one (the static rule everywhere)."""
    path = os.environ.get(TABLE_ENV)
    if not path:
        return SkinnyTable()
    with open(path, encoding="utf-8") as f:
        return parse_table(json.load(f))


#: The table ``linear`` reads (replace its contents to change the choices in a running process).
TABLE = load_table()
