"""Launch settings of the block-scaled FP8 GEMM (:mod:`infercore_triton.fp8_block_gemm`): the measured table
(:data:`TUNED`), a table written by a sweep on the machine at hand (``INFERCORE_FP8_BLOCK_TABLE``, see
:func:`load_table`), and the default for shapes neither holds."""

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

#: A JSON launch table (written by ``benchmarks/fp8_gemm.py --sweep --write-table PATH``) whose entries
#: override :data:`TUNED`; read once, at the first GEMM.
TABLE_ENV = "INFERCORE_FP8_BLOCK_TABLE"
TABLE_FORMAT = "infercore-fp8-block-gemm-table/1"


@dataclass(frozen=True)
class BlockGemmConfig:
    """Launch settings: output tile (``block_m`` rows by ``tile_n`` columns), K split in ``split_k``
    ranges of whole scale groups, Triton's warps and pipeline stages."""

    block_m: int
    tile_n: int
    split_k: int = 1
    num_warps: int = 4
    num_stages: int = 3

    def __post_init__(self) -> None:
        for name in ("block_m", "tile_n", "split_k", "num_warps"):
            value = getattr(self, name)
            if value < 1 or value & (value - 1):
                raise ValueError(f"BlockGemmConfig.{name} must be a power of two, got {value}")
        if self.block_m < 16 or self.tile_n < 16:
            raise ValueError(f"tl.dot needs tiles of at least 16 rows and columns, got {self}")
        if self.num_stages < 1:
            raise ValueError(f"BlockGemmConfig.num_stages must be at least 1, got {self.num_stages}")


def _tuned(block_m: int, tile_n: int, split_k: int, num_stages: int) -> BlockGemmConfig:
    return BlockGemmConfig(block_m=block_m, tile_n=tile_n, split_k=split_k, num_stages=num_stages)


#: Measured settings by ``(m_bucket(M), N, K)`` where they differ from :func:`default_config`
#: (``benchmarks/fp8_gemm.py --sweep`` on an H100 80GB HBM3, Qwen3-8B's projections, the block GEMM with 128-row
#: tiles and split-K partials summed by the last split); other shapes use the default. At one row the qkv
#: projection takes 15.0 µs against cuBLAS bf16's 25.8, gate_up 45.9 against 80.3.
TUNED: dict[tuple[int, int, int], BlockGemmConfig] = {
    (16, 6144, 4096): _tuned(16, 32, 4, 4), (32, 6144, 4096): _tuned(32, 32, 4, 3),
    (64, 6144, 4096): _tuned(64, 64, 2, 4), (128, 6144, 4096): _tuned(64, 64, 1, 5),
    (256, 6144, 4096): _tuned(64, 64, 1, 4), (512, 6144, 4096): _tuned(64, 128, 1, 4),
    (64, 4096, 4096): _tuned(64, 32, 2, 4), (128, 4096, 4096): _tuned(64, 64, 1, 5),
    (256, 4096, 4096): _tuned(64, 64, 1, 5), (512, 4096, 4096): _tuned(64, 128, 1, 4),
    (128, 24576, 4096): _tuned(64, 64, 1, 4),
    (16, 4096, 12288): _tuned(16, 32, 4, 4), (32, 4096, 12288): _tuned(32, 32, 4, 4),
    (64, 4096, 12288): _tuned(64, 64, 4, 4), (128, 4096, 12288): _tuned(64, 64, 4, 3),
    (256, 4096, 12288): _tuned(64, 128, 2, 4), (512, 4096, 12288): _tuned(64, 128, 1, 4),
}


def m_bucket(m: int) -> int:
    """The tuning bucket of ``m`` rows: the next power of two, at least 16."""
    return max(16, triton.next_power_of_2(m))


def _block_m(m: int) -> int:
    return 16 if m <= 16 else 32 if m <= 32 else 64


@functools.lru_cache(maxsize=512)
def default_config(m: int, n: int, k: int, block_n: int, block_k: int, num_sms: int = 132) -> BlockGemmConfig:
    """From 128 rows, 128 x 128 tiles over 8 warps and 4 stages while they alone give every multiprocessor
    a program. Otherwise tiles as wide as the weight's scale block (at most 128) over 16-64 rows; while
    there are fewer than two programs per multiprocessor, tiles narrow to 32 columns and then K splits
    (each split keeping at least two scale groups)."""
    if m >= 128 and block_n % 128 == 0 and triton.cdiv(m, 128) * triton.cdiv(n, 128) >= num_sms:
        return BlockGemmConfig(block_m=128, tile_n=128, num_warps=8, num_stages=4)
    block_m = _block_m(m)
    tile_n = min(128, triton.next_power_of_2(block_n))
    m_tiles = triton.cdiv(m, block_m)
    while tile_n > 32 and m_tiles * triton.cdiv(n, tile_n) < 2 * num_sms:
        tile_n //= 2
    split_k, groups = 1, triton.cdiv(k, block_k)
    while m_tiles * triton.cdiv(n, tile_n) * split_k < 2 * num_sms and groups >= 4 * split_k:
        split_k *= 2
    return BlockGemmConfig(block_m=block_m, tile_n=tile_n, split_k=split_k)


def table_entries(table: dict[tuple[int, int, int], BlockGemmConfig]) -> list[dict[str, Any]]:
    """``table`` as the JSON entries :func:`load_table` reads."""
    return [{"m": m, "n": n, "k": k, **asdict(cfg)} for (m, n, k), cfg in sorted(table.items())]


def write_table(path: str | Path, table: dict[tuple[int, int, int], BlockGemmConfig],
                channel_triton_max_m: int | None = None, **about: Any) -> None:
    """Write ``table`` (keyed by ``(m_bucket, N, K)``) where ``INFERCORE_FP8_BLOCK_TABLE`` can name it, with
    the per-channel path's switch-over (:func:`channel_triton_max_m`) when given; ``about`` (the device,
    say) is stored alongside."""
    data: dict[str, Any] = {"format": TABLE_FORMAT, **about, "entries": table_entries(table)}
    if channel_triton_max_m is not None:
        data["channel_triton_max_m"] = channel_triton_max_m
    Path(path).write_text(json.dumps(data, indent=1))


def _parse(data: Any, path: str | Path) -> tuple[dict[tuple[int, int, int], BlockGemmConfig], int | None]:
    if not isinstance(data, dict) or data.get("format") != TABLE_FORMAT:
        raise ValueError(f"{path} is not an FP8 block GEMM launch table (format {TABLE_FORMAT!r})")
    table = {}
    for entry in data["entries"]:
        fields = {key: int(entry[key]) for key in ("block_m", "tile_n", "split_k", "num_warps", "num_stages")}
        table[(int(entry["m"]), int(entry["n"]), int(entry["k"]))] = BlockGemmConfig(**fields)
    switch = data.get("channel_triton_max_m")
    return table, None if switch is None else int(switch)


def read_table(path: str | Path) -> dict[tuple[int, int, int], BlockGemmConfig]:
    """The entries of a table :func:`write_table` wrote; raises ``ValueError`` for another file."""
    return _parse(json.loads(Path(path).read_text()), path)[0]


@functools.cache
def _table_file() -> tuple[dict[tuple[int, int, int], BlockGemmConfig], int | None]:
    path = os.environ.get(TABLE_ENV)
    if not path:
        return {}, None
    try:
        return _parse(json.loads(Path(path).read_text()), path)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        logger.warning("ignoring %s=%s: %s", TABLE_ENV, path, exc)
        return {}, None


def load_table() -> dict[tuple[int, int, int], BlockGemmConfig]:
    """The entries of the file ``INFERCORE_FP8_BLOCK_TABLE`` names, read once (empty without one; a file
    that cannot be read is reported and ignored)."""
    return _table_file()[0]


def reload_table() -> None:
    """Read ``INFERCORE_FP8_BLOCK_TABLE`` again at the next GEMM (after the variable or the file changed)."""
    _table_file.cache_clear()

#: Rows up to which per-channel (and per-tensor) FP8 GEMMs run this kernel with per-column weight scales
#: rather than ``torch._scaled_mm``, unless the table says otherwise (0: ``_scaled_mm`` at every size). The
#: sweep on an H100 measured this kernel ahead of ``_scaled_mm`` up to 128 rows (at one row, qkv 15.2 µs against 19.9).
CHANNEL_TRITON_MAX_M = 128


def channel_triton_max_m() -> int:
    """The table's ``channel_triton_max_m`` (the sweep's measured switch-over), else
    :data:`CHANNEL_TRITON_MAX_M`."""
    switch = _table_file()[1]
    return CHANNEL_TRITON_MAX_M if switch is None else switch


def config_for(m: int, n: int, k: int, block_n: int, block_k: int, num_sms: int = 132) -> BlockGemmConfig:
    """The settings for an ``m`` x ``n`` x ``k`` product: the entry of the table ``INFERCORE_FP8_BLOCK_TABLE``
    names, else of :data:`TUNED`, when its tiles fit the weight's scale blocks; else the default."""
    key = (m_bucket(m), n, k)
    cfg = load_table().get(key) or TUNED.get(key)
    if cfg is None or block_n % cfg.tile_n:
        return default_config(m, n, k, block_n, block_k, num_sms)
    return cfg
