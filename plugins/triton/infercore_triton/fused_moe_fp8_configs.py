"""Launch settings of the FP8 fused-MoE kernels (:mod:`infercore_triton.fused_moe_fp8`): the default by
batch size, and a table written by a sweep on the machine at hand (``INFERCORE_FP8_MOE_TABLE``, see
:func:`load_table`) whose entries replace it for their shapes."""

from __future__ import annotations

import functools
import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import triton

logger = logging.getLogger(__name__)

#: A JSON launch table (written by ``benchmarks/fp8_moe.py --sweep --write-table PATH``); read once, at the
#: first call.
TABLE_ENV = "INFERCORE_FP8_MOE_TABLE"
TABLE_FORMAT = "infercore-fp8-moe-table/1"


@dataclass(frozen=True)
class GemmLaunch:
    """One grouped GEMM's tile width (``tile_n`` output columns), Triton's warps and pipeline stages."""

    tile_n: int
    num_warps: int = 4
    num_stages: int = 3


@dataclass(frozen=True)
class MoeFp8Config:
    """The row block both GEMMs share (the slot alignment's ``block_m``) and each GEMM's launch: ``up`` the
    gate-and-up GEMM, ``down`` the down projection's."""

    block_m: int
    up: GemmLaunch
    down: GemmLaunch

    def __post_init__(self) -> None:
        for value in (self.block_m, self.up.tile_n, self.down.tile_n, self.up.num_warps, self.down.num_warps):
            if value < 1 or value & (value - 1):
                raise ValueError(f"MoeFp8Config sizes must be powers of two: {self}")
        if min(self.block_m, self.up.tile_n, self.down.tile_n) < 16:
            raise ValueError(f"tl.dot needs tiles of at least 16 rows and columns, got {self}")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> MoeFp8Config:
        return cls(int(raw["block_m"]), GemmLaunch(**raw["up"]), GemmLaunch(**raw["down"]))


def token_bucket(tokens: int) -> int:
    """The tuning bucket of a batch of ``tokens``: the next power of two."""
    return triton.next_power_of_2(max(1, tokens))


def default_config(tokens: int, top_k: int, num_experts: int, inter2: int, hidden: int) -> MoeFp8Config:
    """Rows in blocks of 16 while experts see 16 rows each or fewer (decode), else 64; tiles of up to 64
    columns with 16-row blocks and 128 with 64-row ones."""
    block_m = 16 if tokens * top_k <= 16 * num_experts else 64
    widest = 128 if block_m == 64 else 64

    def tile(n: int) -> int:
        return max(16, min(widest, triton.next_power_of_2(n)))

    return MoeFp8Config(block_m, GemmLaunch(tile(inter2)), GemmLaunch(tile(hidden)))


TableKey = tuple[int, int, int, int, int]


def table_key(tokens: int, top_k: int, num_experts: int, inter2: int, hidden: int) -> TableKey:
    """``(token bucket, top_k, experts, 2I, H)``: what a table entry is measured for."""
    return (token_bucket(tokens), top_k, num_experts, inter2, hidden)


@functools.cache
def load_table(path: str | None = None) -> dict[TableKey, MoeFp8Config]:
    """The entries of the table at ``path`` (default: ``$INFERCORE_FP8_MOE_TABLE``); empty when unset. An
    unreadable table is logged and ignored: the default settings are always correct, only slower."""
    path = path if path is not None else os.environ.get(TABLE_ENV) or None
    if not path:
        return {}
    try:
        raw = json.loads(Path(path).read_text())
        if raw.get("format") != TABLE_FORMAT:
            raise ValueError(f"format {raw.get('format')!r} is not {TABLE_FORMAT!r}")
        return {tuple(int(v) for v in entry["key"]): MoeFp8Config.from_json(entry["config"])  # type: ignore[misc]
                for entry in raw["entries"]}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        logger.warning("ignoring the FP8 MoE launch table %s (%s); using the default settings", path, exc)
        return {}


def write_table(path: str | Path, entries: dict[TableKey, MoeFp8Config]) -> None:
    """Write ``entries`` where :func:`load_table` reads them."""
    body = {"format": TABLE_FORMAT,
            "entries": [{"key": list(key), "config": cfg.to_json()} for key, cfg in sorted(entries.items())]}
    Path(path).write_text(json.dumps(body, indent=1))


def config_for(tokens: int, top_k: int, num_experts: int, inter2: int, hidden: int) -> MoeFp8Config:
    """The table's settings for this shape and batch bucket, else :func:`default_config`."""
    found = load_table().get(table_key(tokens, top_k, num_experts, inter2, hidden))
    return found or default_config(tokens, top_k, num_experts, inter2, hidden)
